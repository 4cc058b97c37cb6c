"""The one terminal table printer: identifiers whole at any width, the rest by priority."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from harness.outputs.compare import print_comparison
from harness.outputs.printed import print_history, print_runs, print_summary
from harness.outputs.terminal import TerminalTable

LONG_MODEL = "unet-resnet34-lr0.001-bce_dice"
RUN = "smoke/20261123-221500-2"


def summary() -> pd.DataFrame:
    return pd.DataFrame({
        "rank": [1, 2], "model": [LONG_MODEL, "fpn"], "val_iou": [0.51234, 0.4], "val_iou_low": [0.45, 0.3],
        "val_iou_high": [0.55, 0.5], "status": ["ok", "ok"], "params": [15000, 3_000_000], "ms_per_step": [12.3, 45.6],
        "val_loss": [0.3, 0.4], "final_train_loss": [0.2, 0.3], "val_f1": [0.6, 0.5],
    })


def printed(width: int, draw) -> str:
    console = Console(width=width, file=io.StringIO())
    draw(console)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [60, 80, 200])
def test_the_ranking_keeps_model_names_and_the_ranking_score_whole_at_any_width(width):
    out = printed(width, lambda c: print_summary(summary(), "val_iou", None, c))
    assert LONG_MODEL in out and "fpn" in out and "0.5123" in out and "val IoU" in out
    if width == 200:
        assert "train loss" in out and "15.0 k" in out
    else:
        assert max(len(line) for line in out.splitlines()) <= width


def header(out: str) -> str:
    return next(line for line in out.splitlines() if "┃ rank" in line)


def test_an_80_column_ranking_shows_what_each_model_costs_to_serve_when_no_status_needs_saying():
    costs = summary().assign(model=["unet", "fpn"], latency_ms=[18.37, 46.83], val_iou_low=[0.4512, 0.3123], val_iou_high=[0.5534, 0.5067])
    every_ok = printed(80, lambda c: print_summary(costs, "val_iou", None, c))
    assert "latency ms" in header(every_ok) and "ms/step" in header(every_ok) and "status" not in header(every_ok)
    assert "every model trained to its end" in " ".join(every_ok.split()) and "46.83" in every_ok
    one_dropped = printed(80, lambda c: print_summary(costs.assign(status=["ok", "dropped (1/1)"]), "val_iou", None, c))
    assert "status" in header(one_dropped) and "dropped" in one_dropped and "every model" not in one_dropped


@pytest.mark.parametrize("width", [60, 80])
def test_runs_show_the_whole_run_id_a_user_copies_into_resume(width):
    runs = pd.DataFrame({"name": ["smoke"], "run_id": ["20261123-221500-2"], "status": ["completed"],
                         "started": ["2026-11-23T22:15:00"], "steps": pd.array([40], dtype="Int64"),
                         "total_steps": pd.array([40], dtype="Int64"), "members": [12], "best": [LONG_MODEL],
                         "ranked_by": ["val_iou"], "best_value": [0.5], "repeats": pd.array([3], dtype="Int64"),
                         "lead_supported_over": pd.array([1], dtype="Int64"), "lead_compared_with": pd.array([2], dtype="Int64")})
    out = printed(width, lambda c: print_runs(runs, "results", c))
    assert RUN in out and "completed" in out
    assert max(len(line) for line in out.splitlines()) <= width  # a best member too long to fit is left out
    assert " of 7 columns at this width; --json for all" in " ".join(out.split()) and LONG_MODEL not in out
    wide = printed(200, lambda c: print_runs(runs, "results", c))
    assert LONG_MODEL in wide and "columns at this width" not in wide and "1 of 2" in wide
    short = printed(80, lambda c: print_runs(runs.assign(best=["unet"]), "results", c))
    header = next(line for line in short.splitlines() if "status" in line)
    assert "unet (val_iou 0.5000)" in short and "started" not in header  # the best before the start the run id tells


def test_history_fits_the_width_with_night_and_run_whole():
    history = pd.DataFrame({"night": ["2026-11-22", "2026-11-23"], "run_id": ["20261122-010000", "20261123-010000"],
                            "status": ["completed", "completed"], "commit": ["0123abcd", "4567ef01"], "regressions": [0, 1],
                            **{f"unet metric_{i}": [0.5, 0.6] for i in range(12)}})
    out = printed(80, lambda c: print_history(history, "smoke", "20261122-010000", c))
    assert "20261122-010000 *" in out and "marked *" in out and "2026-11-23" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "5 of 17 columns at this width; --json for all" in " ".join(out.split())  # 4 when the mark was " (baseline)"
    header = next(line for line in out.splitlines() if "night" in line)
    assert "regressions" in header and "metric_0" in header and "status" not in header  # the metrics before status and commit


def test_history_sets_three_models_side_by_side_at_80_columns():
    """Each model's name above its metric, so a column is as wide as its figures: on one line
    ("deconv val_iou"), 80 columns held two models' val_iou and not the third's."""
    metrics = ("val_iou", "best_val_loss")
    history = pd.DataFrame({"night": ["2026-11-22"], "run_id": ["20261122-010000"], "status": ["completed"], "regressions": [1],
                            **{f"{model} {metric}": [0.5] for metric in metrics for model in ("deconv", "fcn", "unet")}})
    out = printed(80, lambda c: print_history(history, "smoke", None, c))
    lines = out.splitlines()
    models, names = (next(line for line in lines if word in line) for word in ("deconv", "night"))
    assert all(model in models for model in ("deconv", "fcn", "unet")) and names.count("val_iou") == 3
    assert max(len(line) for line in lines) <= 80


def test_a_table_said_to_fit_fits_exactly_with_no_cell_cut():
    """rich draws n columns in their widths + 3n + 1 characters; the fitting counted 3 more for the
    outer border, so a column that fitted by 1 to 3 characters was left out (with a test split's
    test_iou, a third model's column in `harness history` at 80 columns). 400 random tables, 30 to
    120 columns wide: none wider than the terminal, no cell cut or wrapped, and some exactly as wide."""
    import random

    from harness.outputs.terminal import print_table

    rng, full = random.Random(1), 0
    for _ in range(400):
        frame = pd.DataFrame({f"c{i}" + "x" * rng.randint(0, 10): ["7" * rng.randint(1, 14) for _ in range(3)] for i in range(rng.randint(2, 9))})
        frame.insert(0, "model", ["m" * rng.randint(1, 12) for _ in range(3)])
        width, out = rng.randint(30, 120), io.StringIO()
        print_table(TerminalTable(frame, list(frame.columns), identifiers=("model",), headers={c: c for c in frame.columns}), "t",
                    Console(file=out, width=width))
        lines = out.getvalue().splitlines()[1:]
        assert len(lines) == 7 and "…" not in out.getvalue() and max(map(len, lines)) <= width, out.getvalue()
        full += max(map(len, lines)) == width
    assert full > 10


def test_history_sets_three_models_test_iou_side_by_side_at_80_columns():
    history = pd.DataFrame({"night": ["2026-11-22"], "run_id": ["20261122-010000"], "status": ["completed"], "regressions": [1],
                            "commit": ["-"], **{f"{model} test_iou": [0.1516] for model in ("deconv", "fcn", "unet")}})
    out = printed(80, lambda c: print_history(history, "nd", None, c))
    assert all(model in out for model in ("deconv", "fcn", "unet")) and max(len(line) for line in out.splitlines()) <= 80


def test_compare_keeps_run_and_model_whole_even_when_they_alone_are_wider_than_the_terminal():
    table = summary().assign(run=RUN)
    out = printed(60, lambda c: print_comparison(table, c))
    assert RUN in out and LONG_MODEL in out


def test_columns_drop_last_first_and_identifiers_never():
    frame = pd.DataFrame({"model": ["m"], "val_iou": [0.5], "params": [10.0], "ms_per_step": [1.0]})
    table = TerminalTable(frame, ["model", "val_iou", "params", "ms_per_step"], identifiers=("model",))
    assert table.fitting(200) == ["model", "val_iou", "params", "ms_per_step"]
    narrow = table.fitting(30)
    assert narrow[0] == "model" and narrow == ["model", "val_iou", "params", "ms_per_step"][: len(narrow)]
    assert table.fitting(1) == ["model"]
