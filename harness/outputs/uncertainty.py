"""From a run's files to its ranking's uncertainty: which statistics apply, on what data.

One seed: the paired bootstrap over validation images, from each member's last evaluation in
val_scores.csv (per-image counts), for val_iou, val_f1 and val_loss. Repeats: paired tests across
seeds of the ranking metric. Read from files only: scores are recomputed with the segmentation
scores function for members with counts, and as a mean loss for the others (autoencoders).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.config.schema import REPEAT_SEPARATOR, ExperimentConfig
from harness.core.evaluation import segmentation_scores
from harness.outputs.statistics import Scored, bootstrap_metric, paired_tests_across_seeds
from harness.outputs.writers import counts_of

BOOTSTRAPPED = ("iou", "f1", "loss")


def ranking_statistics(val_scores: Path, config: ExperimentConfig, member_summary: pd.DataFrame):
    """(intervals per model or None, pair statistics of the ranking metric or None)."""
    rank_by = config.output.rank_by
    if config.train.repeats > 1:
        ok = member_summary[member_summary["status"] == "ok"]
        if rank_by not in ok:
            return None, None
        parts = ok["model"].str.rsplit(REPEAT_SEPARATOR, n=1, expand=True)
        per_seed = pd.DataFrame({"model": parts[0], "seed": parts[1], rank_by: ok[rank_by]})
        return None, paired_tests_across_seeds(per_seed, rank_by)
    scored = last_evaluations(val_scores, config.data.classes)
    if len(scored) == 0:
        return None, None
    intervals, pair_stats = [], None
    for metric in BOOTSTRAPPED:
        per_member, per_pair = bootstrap_metric(scored, metric)
        if per_member.empty:
            continue
        intervals.append(per_member.drop(columns="value").rename(columns={"low": f"val_{metric}_low", "high": f"val_{metric}_high"}).set_index("model"))
        if f"val_{metric}" == rank_by:
            pair_stats = per_pair
    merged = pd.concat(intervals, axis=1).reset_index() if intervals else None
    return merged, pair_stats


def last_evaluations(path: Path, classes: int) -> dict[str, Scored]:
    """Each member's per-image quantities at its last evaluation (a diverged member's last one
    before it diverged), for the members scored on the same images as the first."""
    if not path.exists():
        return {}
    frame = pd.read_csv(path, dtype={"model": str})
    scored: dict[str, Scored] = {}
    for model, rows in frame.groupby("model", sort=False):
        last = rows[rows["step"] == rows["step"].max()].sort_values("image")
        counts = counts_of(last, classes)
        if np.isnan(counts["intersection"]).any():  # no counts: a reconstruction member
            scored[model] = Scored({"loss": counts["loss"]}, _mean_loss)
        else:
            scored[model] = Scored(counts, segmentation_scores)
    sizes = {len(s.quantities["loss"]) for s in scored.values()}
    return scored if len(sizes) == 1 else {}


def _mean_loss(totals: dict, examples) -> dict:
    return {"loss": np.asarray(totals["loss"], np.float64) / examples}
