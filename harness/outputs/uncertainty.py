"""From a run's files to its ranking's uncertainty: which statistics apply, on what data.

One seed: the paired bootstrap over validation images, from each member's last evaluation in
val_scores.csv (per-image counts), for val_iou, val_f1 and val_loss: intervals of image noise
only, and no pair called supported. Repeats: per model and per pair, the mean over seeds with an
interval of training randomness and image noise (statistics.across_seeds), the image part from
the same image resamples for every member. Read from files only: scores are recomputed with the
segmentation scores function for members with counts, and as a mean loss for the others
(autoencoders).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.config.naming import model_of, repeat_of
from harness.config.schema import ExperimentConfig
from harness.core.evaluation import segmentation_scores
from harness.outputs.statistics import IMAGES_ONLY, SEEDS_AND_IMAGES, SEEDS_ONLY, Scored, across_seeds, bootstrap_metric, image_draws
from harness.outputs.writers import counts_of

BOOTSTRAPPED = ("iou", "f1", "loss")


def ranking_statistics(val_scores: Path, config: ExperimentConfig, member_summary: pd.DataFrame):
    """(intervals per model or None, pair statistics of the ranking metric or None)."""
    if config.train.repeats > 1:
        return _across_repeats(val_scores, config, member_summary)
    scored = last_evaluations(val_scores, config.data.classes)
    if len(scored) == 0:
        return None, None
    intervals, pair_stats = [], None
    for metric in BOOTSTRAPPED:
        per_member, per_pair = bootstrap_metric(scored, metric)
        if per_member.empty:
            continue
        intervals.append(per_member.drop(columns="value").rename(columns={"low": f"val_{metric}_low", "high": f"val_{metric}_high"}).set_index("model"))
        if f"val_{metric}" == config.output.rank_by:
            pair_stats = per_pair
    merged = pd.concat(intervals, axis=1).reset_index() if intervals else None
    return merged, pair_stats


def interval_covers(config: ExperimentConfig) -> str | None:
    """What the ranking metric's intervals cover, in words (summary.csv `interval_covers`)."""
    bootstrapped = config.output.rank_by.removeprefix("val_") in BOOTSTRAPPED and config.output.rank_by.startswith("val_")
    if config.train.repeats > 1:
        return SEEDS_AND_IMAGES if bootstrapped else SEEDS_ONLY
    return IMAGES_ONLY if bootstrapped else None


def _across_repeats(val_scores: Path, config: ExperimentConfig, member_summary: pd.DataFrame):
    """Per model `<metric>_low/_high` over seeds and images for every validation metric with a
    per-image basis (and the ranking metric, over seeds alone, where it has none)."""
    rank_by = config.output.rank_by
    ok = member_summary[member_summary["status"] == "ok"]
    scored = {name: s for name, s in last_evaluations(val_scores, config.data.classes).items() if name in set(ok["model"])}
    columns = [f"val_{m}" for m in BOOTSTRAPPED if f"val_{m}" in ok]
    if rank_by in ok and rank_by not in columns:
        columns.append(rank_by)
    intervals, pair_stats = [], None
    for column in columns:
        metric = column.removeprefix("val_")
        draws = image_draws(scored, metric) if column.startswith("val_") and metric in BOOTSTRAPPED else None
        per_seed = pd.DataFrame({"model": ok["model"].map(model_of), "repeat": ok["model"].map(repeat_of), "member": ok["model"], "value": ok[column]}).dropna()
        per_model, per_pair = across_seeds(per_seed, column, draws)
        if per_model.empty:
            continue
        intervals.append(per_model.set_index("model")[["low", "high"]].rename(columns={"low": f"{column}_low", "high": f"{column}_high"}))
        if column == rank_by:
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
