"""`harness runs [NAME]`: every run under the results folder, newest first, from files only."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from harness.config.metrics import higher_is_better, on_split, split_column
from harness.config.schema import NAME_PATTERN
from harness.errors import ConfigError, did_you_mean
from harness.outputs.tables import none_finished
from harness.rundir import RunDir, RunStatus, holder_of, read_csv, runs_held, runs_in

COLUMNS = ["name", "run_id", "status", "started", "steps", "total_steps", "members", "best", "ranked_by", "best_value",
           "repeats", "lead_supported_over", "lead_compared_with"]


def where_runs_are(results: Path, name: str | None) -> tuple[Path, str | None]:
    """(results folder, experiment) that `harness runs NAME` lists. NAME is an experiment's name
    (results/NAME); what no config could be named (`results/smoke`, `/data/results`, `.`) is a
    path, taken for what the folder holds, as users paste the paths the other commands print: a
    results folder, one experiment's runs, or one run (its experiment's runs are listed). A name
    that is also a folder here holding runs (`harness runs archive`, no results/archive) is that folder."""
    if name is None:
        return results, None
    if re.match(NAME_PATTERN, name) and ((results / name).is_dir() or not _holds_runs(Path(name))):
        return results, name
    folder = Path(name)
    if (folder / "run.json").is_file():
        return folder.parent.parent, folder.parent.name
    if runs_in(folder):
        return folder.parent, folder.name
    return folder, None


def _holds_runs(folder: Path) -> bool:
    """A run, an experiment's runs, or a results folder of experiments."""
    return (folder / "run.json").is_file() or bool(runs_held(folder))


def no_runs(results: Path, name: str | None) -> str:
    """What `harness runs` says when it lists nothing: where it looked, and for a name that is no
    experiment's, the experiments that have runs there (`smok`: did you mean 'smoke'?)."""
    where = f"no runs under {results / name if name else results}"
    if not name or not results.is_dir():
        return where
    experiments = sorted(p.name for p in results.iterdir() if p.is_dir() and runs_in(p))
    return where + (did_you_mean(name, experiments, "experiments with runs there:") if experiments else "")


def list_runs(results: Path, name: str | None = None) -> pd.DataFrame:
    """One row per run directory (a folder with run.json) under results/<name>/, newest first. A
    run whose run.json says `running` but whose lock no process holds was killed, or stopped by a
    full disk before it could say so: its status reads `stopped (run.json says running)`."""
    experiments = [results / name] if name else sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []
    rows = [_row(run) for folder in experiments for run in runs_in(folder)]
    table = pd.DataFrame([r for r in rows if r is not None], columns=COLUMNS)
    table = table.astype({"steps": "Int64", "total_steps": "Int64", "members": "Int64", "best_value": "Float64",
                          "repeats": "Int64", "lead_supported_over": "Int64", "lead_compared_with": "Int64"})  # --json: numbers
    return table.sort_values(["started", "run_id"], ascending=False, na_position="last").reset_index(drop=True)


def _row(run: Path) -> dict | None:
    try:
        info = RunDir(run).read_record()
    except ConfigError:
        return {"name": run.parent.name, "run_id": run.name, "status": "unreadable run.json"}
    status = str(info.status)
    if info.status == RunStatus.RUNNING and holder_of(run) is None:
        status = "stopped (run.json says running)"
    row = {
        "name": info.name or run.parent.name,
        "run_id": run.name,
        "status": status,
        "started": info.started,
        "steps": int(info.steps_done or 0),
        "total_steps": info.total_steps,
        "members": len(info.models) or sum(len(g.get("members") or []) for g in info.groups or []),  # groups: listed before merged
    }
    summary = run / "summary.csv"
    if info.status == RunStatus.COMPLETED and not summary.is_file():
        row["best"] = "no summary.csv"  # `harness report RUN` rebuilds it
    if summary.is_file():
        try:
            table = read_csv(summary)
        except (OSError, ValueError, pd.errors.ParserError):
            table = pd.DataFrame()
        if "model" not in table:  # not a table harness wrote (cut short, or another file)
            row["best"] = "unreadable summary.csv"
            return row
        ranked_by = ((info.config or {}).get("output") or {}).get("rank_by")
        if isinstance(ranked_by, str) and split_column(ranked_by)[0] == "val" and on_split(ranked_by, "test") in table:
            ranked_by = on_split(ranked_by, "test")  # a run with a test split is ranked on test
        if len(table) and ranked_by in table:
            best = table.iloc[0]
            if "status" in table and none_finished(best["status"]):  # ranked last: no model finished
                row.update(best="none finished", ranked_by=ranked_by)
            else:
                row.update(best=str(best["model"]), ranked_by=ranked_by, best_value=float(best[ranked_by]))
                row.update(lead_of(run, best, ranked_by, [n for m in info.models.values() for n in m.higher_is_better]))
    return row


def lead_of(run: Path, best: pd.Series, ranked_by: str, declared: list[str]) -> dict:
    """How far the run's statistics back its leader (pairs.csv, on the ranking column): over how
    many of the models compared with it its lead is supported (Holm-adjusted, with repeats), and
    of how many. A model compared with nothing (a race's dropped one, one that finished no seed)
    is not counted. With one seed nothing is called supported (training randomness not measured):
    `repeats` 1 says so. Nothing when pairs.csv is missing or unreadable."""
    repeats = int(best["repeats"]) if "repeats" in best and pd.notna(best["repeats"]) else 1
    try:
        pairs = read_csv(run / "pairs.csv")
    except (OSError, ValueError, pd.errors.ParserError):
        return {"repeats": repeats}
    if not {"model_a", "model_b", "metric", "diff", "supported"} <= set(pairs.columns):
        return {"repeats": repeats}
    leader = str(best["model"])
    mine = pairs[(pairs["metric"] == ranked_by) & ((pairs["model_a"] == leader) | (pairs["model_b"] == leader)) & pairs["diff"].notna()]
    leader_minus_other = mine["diff"].where(mine["model_a"] == leader, -mine["diff"])
    ahead = (leader_minus_other > 0) == higher_is_better(ranked_by, declared)
    supported = mine["supported"].astype(str).str.lower() == "true"  # a blank is no support
    return {"repeats": repeats, "lead_supported_over": int((ahead & supported).sum()), "lead_compared_with": len(mine)}
