"""Trend plots of a nightly experiment: each watched metric across nights, one line per model,
with each night's own interval, the baseline, the regressions and the nights whose software
changed marked (`harness nightly`, plots/nightly/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.outputs.plots import error_bars, model_colours, place_legend, plt, save_figure


def plot_trend(ax, history: pd.DataFrame, metric: str, baseline_run: str | None = None, regressed: set | None = None, version_changes: dict | None = None):
    """A metric across nights (history.table() rows), one line per model; the baseline night is
    marked, (model, run) pairs that regressed get a red ring, and a dotted line stands before each
    night that ran other versions than the night before it (`version_changes`: {run_id: {package:
    "2.20.0 -> 2.21.0"}}), named at its top: a step there may be the software's, not the models'."""
    rows = history[history["metric"] == metric].copy()
    runs = rows.drop_duplicates("run_id")[["run_id", "night"]]
    labels = [n if isinstance(n, str) and n else r for r, n in zip(runs["run_id"], runs["night"])]
    position = {run: i for i, run in enumerate(runs["run_id"])}
    colours = model_colours(list(rows["model"].unique()))
    bounds = _nightly_bounds(history, metric)
    models = list(rows["model"].unique())
    # With bars, each model a little aside of the night (at most 0.3 of a night's width in all), or
    # every model's bar at one x hides the others'.
    dodge = {m: (i - (len(models) - 1) / 2) * min(0.08, 0.3 / max(len(models), 1)) for i, m in enumerate(models)} if len(bounds) else {}
    for model, group in rows.groupby("model"):
        x = group["run_id"].map(position) + dodge.get(model, 0.0)
        ax.plot(x, group["value"], marker="o", color=colours[model], label=model)
        if len(bounds):
            night = group.merge(bounds, on=["run_id", "model"], how="left")
            ax.errorbar(x, group["value"], yerr=error_bars(night["value"], night["low"], night["high"]), fmt="none", ecolor=colours[model], capsize=3, alpha=0.5)
        for run, value in zip(group["run_id"], group["value"]):
            if regressed and (model, run) in regressed:
                ax.scatter(position[run] + dodge.get(model, 0.0), value, s=160, facecolors="none", edgecolors="red", linewidths=2, zorder=4)
    if baseline_run in position:
        ax.axvline(position[baseline_run], color="grey", linestyle="--", linewidth=1, label="baseline")
    _mark_version_changes(ax, position, version_changes or {})
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} across nights" + (_nightly_bounds_said(history, bounds, metric) if len(bounds) else ""), fontsize=10)
    ax.grid(alpha=0.3)
    if len(rows):
        place_legend(ax, fontsize=8)
    return ax


def _nightly_bounds(history: pd.DataFrame, metric: str) -> pd.DataFrame:
    """run_id, model, low, high: each night's own 95% interval of `metric` (summary.csv's
    `<metric>_low` and `_high`, which the history keeps with every numeric column)."""
    sides = [history[history["metric"] == f"{metric}_{side}"][["run_id", "model", "value"]].rename(columns={"value": side})
             for side in ("low", "high")]
    return sides[0].merge(sides[1], on=["run_id", "model"]).dropna(subset=["low", "high"], how="all")


def _nightly_bounds_said(history: pd.DataFrame, bounds: pd.DataFrame, metric: str) -> str:
    """What the nights' bars cover: a night with repeats has `<metric>_std` (seed-to-seed)."""
    seeded = set(history.loc[(history["metric"] == f"{metric}_std") & history["value"].notna(), "run_id"])
    nights = set(bounds["run_id"])
    covers = ("training seeds and images" if nights <= seeded else "images only (one training seed)" if not nights & seeded
              else "seeds and images on nights with repeats, images only on the others")
    return f"\nbars: each night's 95% interval, of {covers}"


def _mark_version_changes(ax, position: dict[str, int], version_changes: dict[str, dict[str, str]]) -> None:
    """A dotted line between a night and the one before it where the versions changed, the
    packages named at the top (their versions are in nightly.md's notes and `harness history`)."""
    marked = [(position[run], changed) for run, changed in version_changes.items() if position.get(run, 0) > 0]
    for i, (x, changed) in enumerate(sorted(marked, key=lambda m: m[0])):
        ax.axvline(x - 0.5, color="tab:purple", linestyle=":", linewidth=1.5, label="other versions" if i == 0 else None)
        ax.annotate(", ".join(sorted(changed)), xy=(x - 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2), textcoords="offset points", rotation=90, ha="left", va="top", fontsize=7, color="tab:purple")


def save_trend_plots(folder: Path, history: pd.DataFrame, metrics: list[str], baseline_run: str | None, regressed: set | None = None, formats=("png",), version_changes: dict | None = None) -> list[Path]:
    """trend_<metric>.<format> for each watched metric the history has; returns the first format's
    paths. The caller leaves it uncalled when a run draws no plots (`plot_formats: []`)."""
    written = []
    for metric in metrics:
        if not (history["metric"] == metric).any():
            continue
        fig, ax = plt.subplots(figsize=(7.5, 4.0))
        plot_trend(ax, history, metric, baseline_run, regressed, version_changes)
        fig.tight_layout()
        written.append(save_figure(fig, folder, f"trend_{metric}", formats)[0])
    return written
