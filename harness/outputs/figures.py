"""Which standard plots a run gets, and from what: a list of `FigureJob`s, each drawn by a
`figure_*` function of plots.py into plots/<stem>.png. This module loads no matplotlib, so the
process that decides what to draw need not (the output processes draw: outputs/pool.py).

Two lists, in the order the data for them is ready: the curves need only losses.csv; the rest
need the summary and pairs, whose statistics come first.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.config.naming import model_of as base_model
from harness.outputs.tables import charted_val_metrics, common_loss_rows, finished


@dataclass(frozen=True)
class FigureJob:
    stem: str  # plots/<stem>.png (and each other format)
    figure: str  # the function of harness.outputs.plots that returns the figure
    args: tuple  # its arguments: DataFrames cut to what it draws (they travel to another process)


def curve_figures(losses: pd.DataFrame, log_scale: bool, compared_on: str | None, members: set[str] | None) -> list[FigureJob]:
    jobs = [FigureJob("loss_curves", "figure_loss_curves", (common_loss_rows(losses, members), log_scale, compared_on))]
    rates = losses[(losses["split"] == "train") & (losses["metric"] == "lr")]
    if len(rates):
        jobs.append(FigureJob("learning_rates", "figure_learning_rates", (rates,)))
    if metrics := charted_val_metrics(losses):
        jobs.append(FigureJob("val_metrics", "figure_val_metrics", (losses[losses["split"] == "val"], metrics)))
    return jobs


COSTS = ("params", "latency_ms", "ms_per_step")  # quality_vs_cost's panels, each when measured


def summary_figures(summary: pd.DataFrame, rank_by: str, pairs: pd.DataFrame | None, seeds: pd.DataFrame | None = None) -> list[FigureJob]:
    """`seeds`: with repeats, summary_members.csv (one row per seed), whose scores the ranking's
    bars show as dots."""
    jobs = []
    if pairs is not None and "diff_low" in pairs and pairs["diff"].notna().any():
        best = base_model(str(summary["model"].iloc[0])) if len(summary) else None
        jobs.append(FigureJob("pair_differences", "figure_pair_differences", (pairs, best)))
    if rank_by in summary and summary[rank_by].notna().any():
        jobs.append(FigureJob("final_" + rank_by, "figure_final", (summary, rank_by, seed_scores(seeds, rank_by))))
        if costs := [c for c in COSTS if c in summary and summary[c].notna().any()]:
            jobs.append(FigureJob("quality_vs_cost", "figure_quality_vs_cost", (summary, rank_by, costs)))
    return jobs


def seed_scores(seeds: pd.DataFrame | None, rank_by: str) -> pd.DataFrame | None:
    """Each finished seed's `rank_by` (model, value), the seeds a model's mean is taken over: what
    a mean and its interval hide, such as 3 of 20 seeds that never learned (deconv in smoke with
    20 seeds: IoU 0 beside a mean of 0.28). None without repeats."""
    if seeds is None or rank_by not in seeds:
        return None
    done = seeds["status"].map(finished) if "status" in seeds else pd.Series(True, index=seeds.index)
    rows = seeds[done]
    return pd.DataFrame({"model": rows["model"].map(base_model), "value": pd.to_numeric(rows[rank_by], errors="coerce")}).dropna()
