"""Runs that older versions of harness made, read by today's code (tests/older_runs/README.md).

A user upgrades harness and keeps their results/: the listing, comparisons, rebuilt reports and the
nightly history must read what the earlier versions wrote, with the same numbers. Today's tests
make their runs with today's code, so none of them would notice a reader that no longer accepts
an older run.json, summary.csv or history.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_main

FIXTURE = Path(__file__).parent / "older_runs"
FIRST, SEEDS = "first/20261206-190206", "seeds/20261206-190223"  # harness 0.1.0, one seed; 0.3.0, three seeds


@pytest.fixture
def results(tmp_path) -> Path:
    """A copy of the older runs, with first/'s history.sqlite made from its SQL text."""
    folder = tmp_path / "results"
    shutil.copytree(FIXTURE, folder)
    dump = (folder / "first" / "history.sql").read_text(encoding="utf-8").replace("{EXPERIMENT}", str(folder / "first"))
    with sqlite3.connect(folder / "first" / "history.sqlite") as conn:
        conn.executescript(dump)
    return folder


def test_runs_lists_older_runs_with_their_best_model_and_how_sure_that_is(results):
    listed = run_main("runs", "--results", results, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {f"{row['name']}/{row['run_id']}": row for row in json.loads(listed.stdout)}
    assert set(rows) == {FIRST, SEEDS}
    assert (rows[FIRST]["best"], rows[FIRST]["ranked_by"], rows[FIRST]["repeats"]) == ("fcn", "val_iou", 1)
    assert (rows[SEEDS]["best"], rows[SEEDS]["ranked_by"], rows[SEEDS]["repeats"]) == ("unet", "test_iou", 3)
    assert (rows[SEEDS]["lead_supported_over"], rows[SEEDS]["lead_compared_with"]) == (0, 1)
    assert all(row["status"] == "completed" and row["steps"] == 16 for row in rows.values())


def test_a_history_the_first_release_wrote_is_read(results):
    shown = run_main("history", "first", "--results", results, "--json")
    assert shown.returncode == 0, shown.stderr
    (night,) = json.loads(shown.stdout)
    assert (night["night"], night["run_id"], night["harness"]) == ("2026-12-06", "20261206-190206", "0.1.0")
    summary = pd.read_csv(results / FIRST / "summary.csv").set_index("model")
    assert night["fcn val_iou"] == pytest.approx(summary.loc["fcn", "val_iou"])


@pytest.mark.parametrize("run", [FIRST, SEEDS])
def test_report_rebuilds_an_older_runs_tables_with_its_numbers(results, run):
    """Every score and interval the older version wrote comes out the same. What is new is added
    (columns since introduced), and a one-seed "supported" of the first release, which covered
    validation-image noise only, is said as what it was: beyond image noise, no model supported."""
    before = {name: pd.read_csv(FIXTURE / run / name) for name in ("summary.csv", "pairs.csv")}
    rebuilt = run_main("report", results / run)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (results / run / "report.html").stat().st_size > 10_000
    summary = pd.read_csv(results / run / "summary.csv")
    scores = [c for c in before["summary.csv"] if c.startswith(("val_", "test_", "selected_val_", "best_val_loss", "final_train_loss"))]
    assert len(scores) >= 8
    pd.testing.assert_frame_equal(summary[["model", *scores]], before["summary.csv"][["model", *scores]], check_dtype=False)
    pairs = pd.read_csv(results / run / "pairs.csv")
    numbers = ["diff", "diff_low", "diff_high", "mean_loss_diff", "a_beats_b"]
    pd.testing.assert_frame_equal(pairs[["model_a", "model_b", *numbers]], before["pairs.csv"][["model_a", "model_b", *numbers]], check_dtype=False)
    if run == FIRST:
        assert before["pairs.csv"]["supported"].any(), "the first release called one-seed differences supported"
        assert not pairs["supported"].any()
        assert pairs["beyond_image_noise"].tolist() == before["pairs.csv"]["supported"].tolist()
        assert all(covers.startswith("validation images only") for covers in pairs["covers"])


def test_compare_and_pairs_read_older_runs_and_say_what_differs(results, tmp_path):
    both = run_main("compare", results / FIRST, results / SEEDS)
    assert both.returncode == 0, both.stderr
    text = both.stdout
    assert "harness: first/20261206-190206 = 0.1.0, seeds/20261206-190223 = 0.3.0" in text
    differ, not_had = text.split("settings that differ between these runs:")[1].split("did not have yet")
    assert "train.repeats: first/20261206-190206 = 1, seeds/20261206-190223 = 3" in differ
    assert "data.test_size: first/20261206-190206 = - (then 0), seeds/20261206-190223 = 16" in differ  # not its default: a change
    assert "data.seed: first/20261206-190206 = - (then 3), seeds/20261206-190223 = 0" in differ  # first's data came from its seed
    assert "data.exif_orientation" not in differ and "data.exif_orientation: first/20261206-190206 = -" in not_had
    copy = tmp_path / "again" / "seeds" / "20261206-190223"
    shutil.copytree(results / SEEDS, copy)
    paired = run_main("compare", "--pairs", results / SEEDS, copy, "--json")
    assert paired.returncode == 0, paired.stderr
    found = json.loads(paired.stdout)
    same = [p for p in found["pairs"] if p["model_a"] == p["model_b"]]
    assert len(found["pairs"]) == 4 and {p["seeds"] for p in found["pairs"]} == {3}
    assert [(p["diff"], p["supported"]) for p in same] == [(0.0, False), (0.0, False)]
    assert any("the same trained networks" in note for note in found["notes"])
