"""From a run's files to its ranking's uncertainty: which statistics apply, on what data.

One seed: the paired bootstrap over validation images, from each member's last evaluation in
val_scores.csv (per-image counts), for val_iou, val_f1 and val_loss: intervals of image noise
only, and no pair called supported. With a test split the same for test_iou, test_f1 and
test_loss from test_scores.csv (the chosen weights, scored once), and the ranking is on test. Repeats: per model and per pair, the mean over seeds with an
interval of training randomness and image noise (statistics.across_seeds), the image part from
the same image resamples for every member. Read from files only: scores are recomputed with the
segmentation scores function for members with counts, and as a mean loss for the others
(autoencoders).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.config.metrics import column, is_per_class, metric_of, split_column
from harness.config.naming import model_of, repeat_of
from harness.config.schema import ExperimentConfig
from harness.core.scores import segmentation_scores
from harness.errors import ConfigError
from harness.outputs.statistics import Scored, across_seeds, bootstrap_metric, image_draws, images_only, mark_equivalence, seeds_and_images, seeds_only
from harness.outputs.tables import finished, read_table
from harness.outputs.writers import VAL_SCORE_BASE, counts_of

BOOTSTRAPPED = ("iou", "f1", "loss")
SCORE_KEYS = (*VAL_SCORE_BASE, "loss")  # every val_scores.csv and test_scores.csv has these


def ranking_statistics(val_scores: Path, config: ExperimentConfig, member_summary: pd.DataFrame, rank: str, test_scores: Path | None = None,
                       models: set[str] | None = None):
    """(intervals per model or None, pair statistics of the ranking column `rank` or None): for the
    validation metrics from val_scores.csv and, with a scored test split, the test metrics from
    test_scores.csv (the ranking column is then a test metric). `models`: only these models'
    members (Holm's adjustment then runs over their pairs alone)."""
    splits = [("val", val_scores)] + ([("test", test_scores)] if test_scores is not None and test_scores.exists() else [])
    if models is not None:
        member_summary = member_summary[member_summary["model"].map(model_of).isin(models)]
    intervals, pair_stats = [], None
    for split, path in splits:
        found, pairs = _split_statistics(path, config, member_summary, split, rank)
        if found is not None:
            intervals.append(found)
        if pairs is not None:
            pair_stats = pairs
    merged = pd.concat(intervals, axis=1).reset_index() if intervals else None
    return merged, pair_stats


def _split_statistics(path: Path, config: ExperimentConfig, member_summary: pd.DataFrame, split: str, rank: str):
    """(per-model intervals indexed by model, or None; pairs of the ranking column if it is of this split)."""
    if config.train.repeats > 1:
        return _across_repeats(path, config, member_summary, split, rank)
    scored = {n: s for n, s in last_evaluations(path, config.data.classes).items() if n in set(member_summary["model"])}
    if len(scored) == 0:
        return None, None
    intervals, pair_stats = [], None
    for metric in BOOTSTRAPPED:
        per_member, per_pair = bootstrap_metric(scored, metric, split=split)
        if per_member.empty:
            continue
        name = column(metric, split)
        intervals.append(per_member.drop(columns="value").rename(columns={"low": f"{name}_low", "high": f"{name}_high"}).set_index("model"))
        if name == rank:
            pair_stats = finished_pairs(per_pair, member_summary)
    return (pd.concat(intervals, axis=1) if intervals else None), pair_stats


def finished_pairs(per_pair: pd.DataFrame, member_summary: pd.DataFrame) -> pd.DataFrame:
    """The pairs of two models that finished: a race's dropped member or a diverged one has an
    interval of its own, but its scores come from fewer steps, not comparable with the others'."""
    done = set(member_summary.loc[member_summary["status"].map(finished), "model"])
    return per_pair[per_pair["model_a"].isin(done) & per_pair["model_b"].isin(done)].reset_index(drop=True) if len(per_pair) else per_pair


def interval_covers(config: ExperimentConfig, rank: str) -> str | None:
    """What the ranking column `rank`'s intervals cover, in words (summary.csv `interval_covers`)."""
    split, _, metric = rank.partition("_")
    bootstrapped = split in ("val", "test") and metric in BOOTSTRAPPED
    if config.train.repeats > 1:
        resampled = config.data.bootstrap_train
        return seeds_and_images(split, resampled) if bootstrapped else seeds_only(resampled)
    return images_only(split) if bootstrapped else None


def _across_repeats(path: Path, config: ExperimentConfig, member_summary: pd.DataFrame, split: str, rank: str):
    """Per model `<split>_<metric>_low/_high` over seeds and images for every metric of the split
    with a per-image basis (and the ranking column `rank`, over seeds alone, where it has none)."""
    done = member_summary[member_summary["status"].map(finished)]  # a race's dropped members, a diverged seed: left out
    scored = {name: s for name, s in last_evaluations(path, config.data.classes).items() if name in set(done["model"])}
    columns = [column(m, split) for m in BOOTSTRAPPED if column(m, split) in done]
    if split == "val" and rank in done and split_column(rank)[0] not in ("val", "test"):
        columns.append(rank)
    intervals, pair_stats = [], None
    for name in columns:
        metric = metric_of(name)
        draws = image_draws(scored, metric) if split_column(name)[0] == split and metric in BOOTSTRAPPED else None
        per_seed = pd.DataFrame({"model": done["model"].map(model_of), "repeat": done["model"].map(repeat_of), "member": done["model"], "value": done[name]}).dropna()
        per_model, per_pair = across_seeds(per_seed, name, draws, split, config.data.bootstrap_train)
        if per_model.empty:
            continue
        intervals.append(per_model.set_index("model")[["low", "high"]].rename(columns={"low": f"{name}_low", "high": f"{name}_high"}))
        if name == rank:
            pair_stats = mark_equivalence(per_pair, config.output.equivalence_margin)
    return (pd.concat(intervals, axis=1) if intervals else None), pair_stats


def test_metrics(test_scores: Path, val_scores: Path, classes: int) -> pd.DataFrame:
    """Per member: the step whose weights were scored on the test split, their test metrics and
    their validation metrics at that step (`selected_val_*`: what choosing saw; the gap to test
    is what choosing added)."""
    if not test_scores.exists():
        return pd.DataFrame()
    frame = read_table(test_scores, SCORE_KEYS, {"model": str})
    steps = frame.groupby("model", sort=False)["step"].max().astype(int).to_dict()
    test = _totals(evaluations_at(frame, classes, source=test_scores))
    val = _totals(last_evaluations(val_scores, classes, at_steps=steps))
    rows = [{"model": name, "selected_step": steps[name], **{column(k, "test"): v for k, v in scores.items()},
             **{column(k, "selected_val"): v for k, v in val.get(name, {}).items()}} for name, scores in test.items()]
    return pd.DataFrame(rows)


def class_metrics(val_scores: Path, classes: int) -> pd.DataFrame:
    """Per member, each foreground class's validation IoU and F1 at its last evaluation
    (`val_iou_c1`, ...; pooled over the images as the overall scores are): which class a model
    gets wrong, beside the mean over classes. Empty with one class."""
    if classes < 2:
        return pd.DataFrame()
    rows = [{"model": name, **{column(k, "val"): v for k, v in scores.items() if is_per_class(k)}}
            for name, scores in _totals(last_evaluations(val_scores, classes)).items()]
    return pd.DataFrame(rows)


def _totals(scored: dict[str, Scored]) -> dict[str, dict[str, float]]:
    """Each member's set-level scores (iou, f1, loss; and each class's iou and f1 with several
    classes) from its per-image quantities."""
    out = {}
    for name, s in scored.items():
        scores = s.scores({k: v.sum(axis=0) for k, v in s.quantities.items()}, len(s.quantities["loss"]))
        out[name] = {k: float(v) for k, v in scores.items() if k in BOOTSTRAPPED or is_per_class(k)}
    return out


def last_evaluations(path: Path, classes: int, at_steps: dict[str, int] | None = None) -> dict[str, Scored]:
    """Each member's per-image quantities at its last evaluation (a diverged member's last one
    before it diverged), or at the step `at_steps` names for it; every member holds the same
    images, or the file is refused as damaged."""
    if not path.exists():
        return {}
    return evaluations_at(read_table(path, SCORE_KEYS, {"model": str}), classes, at_steps, source=path)


def evaluations_at(frame: pd.DataFrame, classes: int, at_steps: dict[str, int] | None = None, source: Path | None = None) -> dict[str, Scored]:
    """`last_evaluations` of a score table already read (from `source`, named if it is damaged)."""
    scored: dict[str, Scored] = {}
    for model, rows in frame.groupby("model", sort=False):
        step = rows["step"].max() if at_steps is None else at_steps.get(model)
        last = rows[rows["step"] == step].sort_values("image")
        if last.empty:
            continue
        counts = counts_of(last, classes)
        if np.isnan(counts["intersection"]).any():  # no counts: a reconstruction member
            scored[model] = Scored({"loss": counts["loss"]}, _mean_loss)
        else:
            scored[model] = Scored(counts, segmentation_scores)
    sizes = {name: len(s.quantities["loss"]) for name, s in scored.items()}
    if len(set(sizes.values())) > 1:  # every member is scored on the same images: rows are missing
        counts = ", ".join(f"{name} {n}" for name, n in sizes.items())
        raise ConfigError(f"{source or 'a score table'}: the members' last evaluations hold different numbers of images ({counts}); "
                          "the file is incomplete (a write that stopped, a copy cut short) or was edited")
    return scored


def _mean_loss(totals: dict, examples) -> dict:
    return {"loss": np.asarray(totals["loss"], np.float64) / examples}
