"""Tonight against an earlier run that trained another number of repeats (`train.repeats`): each
model's watched values compared over the repeats both runs trained, paired by repeat as `harness
compare --pairs` pairs them, not one run's mean over three seeds against the other's one seed (a
seed-to-seed spread of 0.09 IoU then reads as a regression of 0.09 when nothing changed but the
count). Read from both run folders' per-member tables; where the earlier folder is gone the
recorded means are compared, and the note says so."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from harness.config.naming import model_of, repeat_of, repeats_span
from harness.outputs.tables import scored_seeds
from harness.rundir.files import read_csv

Values = dict[tuple[str, str], float]
_NONE = pd.DataFrame()  # a model one run lacks: no seeds


def over_common_repeats(now: Values, before: Values, earlier_dir: str | None, earlier_id: str, tonight: Path,
                        metrics: list[str]) -> tuple[Values, Values, list[str]]:
    """(tonight's values, the earlier run's, notes): for each model whose number of repeats differs
    between the runs, every watched metric as the mean over the repeats both trained (a seed that
    failed left out, as summary.csv leaves it out); tonight's interval of such a metric is dropped
    where it covered seeds the comparison leaves out. Unchanged where the repeats agree."""
    differ = sorted(m for (m, c), r in now.items() if c == "repeats" and (m, "repeats") in before and before[(m, "repeats")] != r)
    if not differ:
        return now, before, []
    each = {m: f"{before[(m, 'repeats')]:g} -> {now[(m, 'repeats')]:g}" for m in differ}
    counts = next(iter(each.values())) if len(set(each.values())) == 1 else ", ".join(f"{m} {c}" for m, c in each.items())
    if not earlier_dir or not _members_table(Path(earlier_dir)).is_file():
        return now, before, [f"repeats differ from {earlier_id} ({counts}) and its per-member table is gone ({earlier_dir or 'folder not recorded'}): "
                             "compared as recorded, each run's mean over its own seeds"]
    try:
        then_rows, now_rows = _finished_values(Path(earlier_dir)), _finished_values(tonight)
    except (OSError, ValueError, KeyError) as exc:  # a table cut short or edited (pandas' ParserError is a ValueError)
        return now, before, [f"repeats differ from {earlier_id} ({counts}) and a per-member table could not be read ({type(exc).__name__}: {exc}): "
                             "compared as recorded, each run's mean over its own seeds"]
    now, before = dict(now), dict(before)
    said, apart = [], []
    for model in differ:
        then_seeds, now_seeds = then_rows.get(model, _NONE), now_rows.get(model, _NONE)
        shared = sorted(set(then_seeds.index) & set(now_seeds.index))
        if not shared:  # e.g. the one seed they share diverged in one run
            apart.append(model)
            continue
        for metric in metrics:
            if metric not in then_seeds or metric not in now_seeds:
                continue  # a column of summary.csv alone: compared as recorded
            before[(model, metric)] = _mean(then_seeds, shared, metric)
            now[(model, metric)] = _mean(now_seeds, shared, metric)
            if len(shared) < len(now_seeds):  # tonight's interval is of a mean over more seeds
                now[(model, f"{metric}_low")] = now[(model, f"{metric}_high")] = math.nan
        said.append(repeats_span([f"{model}@{r}" for r in shared]))
    unshared = f"; {', '.join(apart)}: no finished repeat in common, compared as recorded" if apart else ""
    return now, before, [f"repeats differ from {earlier_id} ({counts}): each model compared over the repeats both runs trained "
                         f"({', '.join(said) or 'none'}), paired by repeat{unshared}; summary.csv keeps each run's mean over all its seeds"]


def _members_table(folder: Path) -> Path:
    members = folder / "summary_members.csv"
    return members if members.is_file() else folder / "summary.csv"


def _finished_values(folder: Path) -> dict[str, pd.DataFrame]:
    """model -> the rows of the seeds its scores are means over, indexed by repeat."""
    table = read_csv(_members_table(folder))
    names = table["model"].astype(str)
    table.index = names.map(repeat_of)
    return {model: scored_seeds(group) for model, group in table.groupby(names.map(model_of).to_numpy(), sort=False)}


def _mean(seeds: pd.DataFrame, repeats: list[int], metric: str) -> float:
    return float(pd.to_numeric(seeds.loc[repeats, metric], errors="coerce").mean())
