"""What `run`, `report`, `runs` and `history` print on a terminal, each through the one table
printer (outputs/terminal.py): the ranking, the list of runs, a nightly history."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.outputs.columns import chosen_rows, terminal_text, with_intervals
from harness.outputs.verdict_text import chosen_on, chosen_pairs_text, validation_choices, verdict
from harness.outputs.tables import left_the_race, ranked_last
from harness.outputs.terminal import TerminalTable, print_table
from harness.outputs.tuning_budget import describe_leaders
from harness.rundir import RunDir, read_csv

# The ranking's columns after the ranking metric, most important first; every column is in
# summary.csv, the terminal shows as many as fit.
SUMMARY_PRIORITY = [
    "status", "params", "ms_per_step", "latency_ms", "test_iou", "test_f1", "val_iou", "val_f1", "val_loss",
    "best_val_loss", "final_train_loss", "serve_images_per_s", "model_mb", "steps",
]


def print_summary(summary: pd.DataFrame, rank_by: str = "val_iou", run_dir: Path | None = None, console=None) -> None:
    """The ranking, best first: the ranking metric right after the model (with its 95% interval
    when there is one), then what the intervals cover and which differences are supported."""
    from rich.console import Console

    console = console or Console()
    run = RunDir(Path(run_dir)) if run_dir is not None else None
    record = run.read_record() if run is not None and run.run_json.is_file() else None
    texts = {rank_by: with_intervals(summary, rank_by)} if rank_by in summary else {}
    # A status column of "ok" only says nothing a line above it cannot: its place goes to the
    # next cost (at 80 columns, serving latency beside ms/step).
    all_ok = "status" in summary and summary["status"].astype(str).eq("ok").all()
    priority = [c for c in SUMMARY_PRIORITY if not (all_ok and c == "status")]
    table = TerminalTable(summary, ["rank", "model", rank_by, *priority], identifiers=("model",), required=("rank", rank_by), texts=texts)
    raced = "status" in summary and left_the_race(summary["status"]).any()
    stopped = bool(record and record.stopped_short)  # interrupted or failed: no model has reached its end
    racing = "the models still racing" if stopped else "the race's finishers"
    order = f"best first: {racing}, then the dropped, later rungs first" if raced else "best first"
    order += ", every model trained to its end" if all_ok and not stopped else ""
    failed_all = "status" in summary and ranked_last(summary["status"]).any()
    order += ", the models that diverged or ran out of memory last" if failed_all else ""
    print_table(table, lambda shown, total: f"ranked by {rank_by}, {order} ({shown} of {len(summary.columns)} columns; all in summary.csv)", console)
    pairs_file = run.path / "pairs.csv" if run is not None else None
    if pairs_file is not None and pairs_file.is_file():
        pairs = read_csv(pairs_file)
        if len(pairs) or len(summary) == 1:  # one model has no pair, and its interval is still said
            console.print(terminal_text(verdict(pairs, rank_by, summary)), soft_wrap=False)
            config = run.read_config()
            chose = bool(record and record.chose_any_weights())
            said = chosen_on(summary, rank_by, chose, config.data.has_test, validation_choices(config, rank_by))
            console.print(terminal_text(said), soft_wrap=False)
    if run_dir is not None and (groups := per_group_lines(summary, Path(run_dir), rank_by)):
        console.print(terminal_text(groups), soft_wrap=False)


def per_group_lines(summary: pd.DataFrame, run_dir: Path, rank_by: str = "val_iou") -> str:
    """With `output.compare_by`: the model each group chose on validation, what their pairs
    support (the question such a run asks: this architecture or that, each at its best), and which
    group is ahead at which tuning budget (the report's Per group section has the rest)."""
    if "chosen_in_group" not in summary:
        return ""
    picked = chosen_rows(summary)
    chosen = dict(zip(picked["compare_group"], picked["model"]))
    groups = dict.fromkeys(summary["compare_group"].dropna())  # in ranking order; a group none of whose models finished says so
    text = "Each group at its best on validation (compare_by.csv; the report's Per group section): " + ", ".join(
        f"{group}: {chosen.get(group, 'none finished')}" for group in groups) + "."
    pairs_file = run_dir / "compare_by.csv"
    if pairs_file.is_file() and pairs_file.stat().st_size > 1 and (between := chosen_pairs_text(read_csv(pairs_file), rank_by)):
        text += " " + between
    budget_file = run_dir / "expected_best.csv"
    if budget_file.is_file() and budget_file.stat().st_size > 1:
        text += " " + describe_leaders(read_csv(budget_file))
    return text.rstrip()


def lead_text(repeats, supported_over, compared_with) -> str:
    """The `lead supported` column: over how many of the models compared with the best one its lead
    is supported (runs.lead_of), `2 of 3`; `one seed` (without repeats nothing is called
    supported: training randomness not measured); `-` when nothing was compared with it."""
    if pd.isna(compared_with) or not compared_with:
        return "-"
    if pd.notna(repeats) and repeats < 2:
        return "one seed"
    return f"{supported_over:.0f} of {compared_with:.0f}"


def print_runs(runs: pd.DataFrame, results: Path, console=None) -> None:
    """`harness runs`: newest first; the run (`name/run_id`, what `resume` and `report` take) whole,
    then what a list of runs is read for, the status, the best member and what backs its lead, and
    last the start, which the run id already tells (a narrow terminal leaves out the last columns first)."""
    frame = pd.DataFrame({
        "run": [f"{n}/{r}" for n, r in zip(runs["name"], runs["run_id"])],
        "status": runs["status"],
        "best": ["-" if not isinstance(b, str) else b if pd.isna(v) else f"{b} ({k} {v:.4f})"  # b: "none finished"
                 for b, k, v in zip(runs["best"], runs["ranked_by"], runs["best_value"])],
        "lead supported": [lead_text(r, s, c) for r, s, c in zip(runs["repeats"], runs["lead_supported_over"], runs["lead_compared_with"])],
        "steps": [f"{s:.0f}/{t:.0f}" if pd.notna(t) else ("-" if pd.isna(s) else f"{s:.0f}") for s, t in zip(runs["steps"], runs["total_steps"])],
        "members": runs["members"],
        "started": ["-" if pd.isna(s) or not s else str(s)[:16].replace("T", " ") for s in runs["started"]],
    })
    print_table(TerminalTable(frame, list(frame.columns), identifiers=("run",), headers={c: c for c in frame.columns}),
                _title_saying_what_is_left_out(f"runs under {results}, newest first"), console)


# What `harness history` shows after the night and the run: how many regressions, then the metrics
# (what a history is read for: two or three of them at 80 columns), then the run's status, the
# commit of the user's code and the harness version it was made with.
HISTORY_FIRST, HISTORY_LAST = ("night", "run_id", "regressions"), ("status", "commit", "harness")


def print_history(history: pd.DataFrame, name: str, baseline: str | None, console=None) -> None:
    """`harness history`: one row per night, as many metric columns as fit; night and run whole."""
    frame = history.copy()
    frame.columns = [str(c) for c in frame.columns]
    # The baseline's row marked by 2 characters, not " (baseline)": 11 of them widened the run column
    # and left room for one metric fewer at 80 columns; the title says what the mark means.
    frame["run_id"] = [f"{r} *" if r == baseline else r for r in frame["run_id"]]
    # "unet val_iou" on two lines: a column as wide as its figures, so more models fit side by side.
    headers = {c: c.replace(" ", "\n", 1) if c not in HISTORY_FIRST + HISTORY_LAST else c for c in frame.columns}
    priority = [*HISTORY_FIRST, *(c for c in frame.columns if c not in HISTORY_FIRST + HISTORY_LAST), *HISTORY_LAST]
    print_table(TerminalTable(frame, priority, identifiers=("night", "run_id"), headers=headers),
                _title_saying_what_is_left_out(f"history of {name} (baseline: {f'{baseline}, marked *' if baseline else 'none'})"), console)


def _title_saying_what_is_left_out(title: str):
    """A narrow terminal (or output to a file, 80 columns) drops the last columns: say so, and
    where they all are, so a missing column is never read as a missing value."""
    return lambda shown, total: title if shown == total else f"{title} ({shown} of {total} columns at this width; --json for all)"
