"""Per-group verdicts (`output.compare_by`): "Unet vs FPN, each at its best learning rate".

The models are grouped by the settings `compare_by` names (`arch`, or `arch` and `backbone`, or a
grid key). Within each group the model chosen is the one best on validation: the validation score
of its chosen weights (`selected_val_<metric>`) when there is a test split, else its validation
score (a model with repeats by its mean over seeds: its seeds are chosen together). The chosen
models are then compared with the run's own statistics (paired, on the test split when there is
one; Holm across the chosen pairs only). What choosing added shows as the gap between each chosen
model's validation and test scores.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.config.metrics import higher_is_better, on_split, split_column
from harness.outputs.columns import flat_settings
from harness.outputs.tables import finished


def model_settings(specs) -> dict[str, dict[str, Any]]:
    """Each model's settings by dotted name, its grid values included: what compare_by groups on."""
    return {s.name: {**flat_settings(s.model_dump(mode="json")), **s.grid_values} for s in specs}


def group_label(settings: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={settings.get(k, '')}" for k in keys)


def chosen_by_column(summary: pd.DataFrame, rank_column: str) -> str:
    """What each group chooses by: the chosen weights' validation score with a test split, else
    the validation score (the ranking column itself when neither is in the summary)."""
    chosen = on_split(rank_column, "selected_val")
    by = chosen if split_column(rank_column)[0] == "test" and chosen in summary else on_split(rank_column, "val")
    return by if by in summary else rank_column


def group_trials(summary: pd.DataFrame, specs, keys: list[str]) -> pd.DataFrame:
    """Every model each group trained (not those that never fit a device), with `group` and
    `finished` columns: a diverged or race-dropped model was tried too."""
    settings = model_settings(specs)
    frame = summary[~summary["status"].astype(str).str.startswith("oom")].copy()
    frame["group"] = [group_label(settings.get(m, {}), keys) for m in frame["model"]]
    frame["finished"] = frame["status"].map(finished).astype(bool)
    return frame


def group_candidates(summary: pd.DataFrame, specs, keys: list[str], by: str) -> pd.DataFrame:
    """The models each group chooses among (finished, scored by `by`), with a `group` column."""
    trials = group_trials(summary, specs, keys)
    return trials[trials["finished"]].dropna(subset=[by])


def choose_per_group(summary: pd.DataFrame, specs, keys: list[str], rank_column: str) -> pd.DataFrame:
    """One row per group: group, model (the chosen one), the validation score it was chosen by,
    its ranking score, how many models the group held."""
    by = chosen_by_column(summary, rank_column)
    rows = []
    for group, members in group_candidates(summary, specs, keys, by).groupby("group", sort=False):
        best = members.sort_values(by, ascending=not higher_is_better(by), kind="stable").iloc[0]
        rows.append({"group": group, "model": best["model"], "chosen_by": by, "chosen_value": float(best[by]),
                     rank_column: float(best[rank_column]) if rank_column in best and pd.notna(best[rank_column]) else float("nan"),
                     "candidates": len(members)})
    return pd.DataFrame(rows)


def group_pairs(chosen: pd.DataFrame, pair_stats: pd.DataFrame | None) -> pd.DataFrame:
    """The chosen models' pairs, each labelled with its groups."""
    if pair_stats is None or pair_stats.empty or chosen.empty:
        return pd.DataFrame(columns=["group_a", "group_b", "model_a", "model_b"])  # a header, no pairs
    groups = dict(zip(chosen["model"], chosen["group"]))
    pairs = pair_stats[pair_stats["model_a"].isin(groups) & pair_stats["model_b"].isin(groups)].copy()
    pairs.insert(0, "group_a", pairs["model_a"].map(groups))
    pairs.insert(1, "group_b", pairs["model_b"].map(groups))
    return pairs.reset_index(drop=True)
