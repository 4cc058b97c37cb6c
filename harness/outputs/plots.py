"""Comparison plots. Each `plot_*` is a pure function of DataFrames: it draws on the `ax` it is
given and returns it, so users can compose them into their own figures. `save_plots` writes the
standard set as PNG and SVG into plots/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only: no display needed, nightly jobs have none
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.colors  # noqa: E402
import matplotlib.patches  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.config.metrics import higher_is_better  # noqa: E402
from harness.outputs.axes import compact_number, counts_axis, log_axis  # noqa: E402
from harness.core.scores import mask_classes  # noqa: E402
from harness.outputs.figures import curve_figures, summary_figures  # noqa: E402
from harness.outputs.statistics import covers_training  # noqa: E402
from harness.outputs.tables import base_model, common_loss_rows, none_finished  # noqa: E402
from harness.outputs.verdict_text import better_first, holm_tested  # noqa: E402

SMOOTHING = 0.9  # exponential moving average weight of the smoothed loss curves


def model_colours(models: list[str]) -> dict[str, Any]:
    """A model keeps its colour in every plot (and every run): colours follow the sorted names,
    not the order a plot happens to draw them in (ranking order differs from config order)."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {m: cycle[i % len(cycle)] for i, m in enumerate(sorted(models))}


LEGEND_INSIDE = 8  # entries a legend may hold inside the axes; more go beside them


def place_legend(ax, **options) -> None:
    """A legend inside the axes where it hides least (a few entries), or beside them (many: inside
    it would cover the curves, and finding the place that hides least took matplotlib 1.2 s of the
    40-member run's 8.8 s of plots)."""
    entries = len(ax.get_legend_handles_labels()[1])
    if entries <= LEGEND_INSIDE:
        ax.legend(**options)
        return
    ax.legend(**{"fontsize": 7, **options}, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, ncol=1 + (entries - 1) // 25)


def _per_model(losses: pd.DataFrame, split: str, metric: str, x: str = "step") -> dict[str, pd.DataFrame]:
    """model -> DataFrame indexed by x with mean, low, high across repeats."""
    rows = losses[(losses["split"] == split) & (losses["metric"] == metric)].copy()
    rows = rows[np.isfinite(rows["value"])]
    rows["base"] = rows["model"].map(base_model)
    out = {}
    for model, group in rows.groupby("base", sort=False):
        stats = group.groupby(x)["value"].agg(["mean", "min", "max", "count"])
        out[model] = stats
    return out


def _seeds_drawn(curves: dict[str, pd.DataFrame]) -> int:
    """How many repeats (training seeds) a curve's mean and band are taken over: 1 without repeats."""
    return max((int(stats["count"].max()) for stats in curves.values() if len(stats)), default=1)


def merge_identical(curves: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Curves equal at every point drawn once, labelled with every model that has it ("fcn, unet:
    the same"): three models on one constant learning rate are one line, and the legend says so."""
    groups: dict[tuple, list[str]] = {}
    for model, stats in curves.items():
        key = (tuple(stats.index), tuple(np.round(stats["mean"].to_numpy(float), 12)))
        groups.setdefault(key, []).append(model)
    return {(", ".join(models) + (" (the same)" if len(models) > 1 else "")): curves[models[0]] for models in groups.values()}


def plot_loss_curves(ax, losses: pd.DataFrame, log_scale: bool = False, smoothing: float = SMOOTHING, compared_on: str | None = None, members: set[str] | None = None):
    """Train loss per step on the common loss (`compared_on`: the loss every member is scored on,
    on the same batches): raw (faint), smoothed (solid), and the band across repeats."""
    curves = _per_model(common_loss_rows(losses, members).assign(metric="loss"), "train", "loss")
    colours = model_colours(list(curves))
    for model, stats in curves.items():
        colour = colours[model]
        ax.plot(stats.index, stats["mean"], color=colour, alpha=0.25, linewidth=0.8)
        smooth = stats["mean"].ewm(alpha=1 - smoothing).mean()
        ax.plot(stats.index, smooth, color=colour, linewidth=2, label=model)
        if stats["count"].max() > 1:
            ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.12, linewidth=0)
    _mark_departures(ax, {m: (s.index, s["mean"].ewm(alpha=1 - smoothing).mean()) for m, s in curves.items()}, colours)
    medians = [stats["mean"].median() for stats in curves.values() if len(stats)]
    if medians and min(medians) > 0 and max(medians) / min(medians) > 10:
        log_scale = True  # losses on different scales (a GAN's adversarial + 100 x L1): keep all readable
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_ylabel("train loss" + (" (log)" if log_scale else ""))
    if log_scale:
        log_axis(ax, "y")
    seeds = _seeds_drawn(curves)
    band = f"\nfaint: mean of {seeds} training seeds, solid: smoothed, shaded: their range" if seeds > 1 else ""
    ax.set_title(f"training loss: {compared_on or 'each model its own'} (same batches for every model){band}", fontsize=10)
    place_legend(ax)
    ax.grid(alpha=0.3)
    return ax


def _mark_departures(ax, curves: dict[str, tuple], colours: dict[str, Any]) -> None:
    """A curve that ends before the others ends in a cross: its member left the run there
    (stopped early, dropped by a race, or diverged); the report's table says which."""
    ends = {model: x[-1] for model, (x, _) in curves.items() if len(x)}
    if not ends:
        return
    last = max(ends.values())
    label = "left the run"
    for model, (x, y) in curves.items():
        if len(x) and x[-1] < last:
            ax.plot([x[-1]], [y.iloc[-1]], marker="X", markersize=10, color=colours[model], markeredgecolor="black", linestyle="none", label=label)
            label = None  # one legend entry for all crosses


def plot_val_metric(ax, losses: pd.DataFrame, metric: str):
    """A validation metric at each epoch end, with the band across repeats."""
    curves = _per_model(losses, "val", metric, x="epoch")
    colours = model_colours(list(curves))
    for model, stats in curves.items():
        ax.plot(stats.index, stats["mean"], marker="o", color=colours[model], label=model)
        if stats["count"].max() > 1:
            ax.fill_between(stats.index, stats["min"], stats["max"], color=colours[model], alpha=0.15, linewidth=0)
    _mark_departures(ax, {m: (s.index, s["mean"]) for m, s in curves.items()}, colours)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylabel(f"val {metric}")
    seeds = _seeds_drawn(curves)
    ax.set_title(f"validation {metric}" + (f"\nmean of {seeds} training seeds, shaded: their range" if seeds > 1 else ""), fontsize=10 if seeds > 1 else None)
    ax.grid(alpha=0.3)
    place_legend(ax)
    return ax


def plot_final_bars(ax, summary: pd.DataFrame, metric: str, seeds: pd.DataFrame | None = None):
    """The ranking metric per model, best first, with its 95% interval, titled with what the
    interval covers (summary.csv `interval_covers`; runs written before it: `_ci95` across seeds);
    `seeds` (model, value): each seed's score as a dot on its model's bar."""
    colours = model_colours(list(summary["model"]))
    values = summary[metric].astype(float)
    errors, label = None, ""
    if f"{metric}_low" in summary:
        errors, label = _interval_bars(summary, metric), "\n" + _interval_label(summary)
    elif f"{metric}_ci95" in summary:
        half = summary[f"{metric}_ci95"].astype(float).fillna(0)
        errors, label = np.vstack([half, half]), " (95% interval across seeds)"
    ax.bar(summary["model"], values, color=[colours[m] for m in summary["model"]], yerr=errors, capsize=6)
    beside = errors is not None  # centred, the value would sit on its error bar's line
    for i, value in enumerate(values):
        ax.annotate(f"{value:.3f}", (i, value), ha="left" if beside else "center", va="bottom", xytext=(5 if beside else 0, 3), textcoords="offset points")
    ax.set_ylabel(metric)
    if seeds is not None and len(seeds):
        _seed_dots(ax, list(summary["model"]), seeds)
        label += "\ndots: each training seed's score"
    if beside and len(summary) > 1:
        # Every model is scored on the same images: their image noise is shared, and a pair's
        # difference is surer than two overlapping bars suggest.
        label += "\n(overlapping intervals do not mean no difference: pairs in pair_differences.png)"
    ax.set_title(f"{metric} by model{label}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if len(summary) > 4 or summary["model"].str.len().max() > 10:  # long or many names: slanted, not overlapping
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
        ax.figure.tight_layout()
    return ax


def _seed_dots(ax, models: list[str], seeds: pd.DataFrame) -> None:
    """Each seed's score over its model's bar, spread across the bar's left half (its right half
    holds the value's label), in the seeds' order: no random jitter, so a run's figure is the
    same each time it is drawn. Not clipped: a seed at 0 sits on the axis, whole."""
    for i, model in enumerate(models):
        values = seeds.loc[seeds["model"] == model, "value"].to_numpy(float)
        if len(values):
            offsets = np.linspace(-0.33, -0.08, len(values)) if len(values) > 1 else np.full(1, -0.2)
            ax.scatter(i + offsets, values, s=12, color="black", alpha=0.6, zorder=4, linewidths=0, clip_on=False)


def _interval_bars(summary: pd.DataFrame, metric: str) -> np.ndarray:
    """Error bars (below, above) of each model's 95% interval of `metric`; 0 where it has none."""
    return error_bars(summary[metric], summary[f"{metric}_low"], summary[f"{metric}_high"])


def error_bars(values: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
    """[below, above] lengths for matplotlib's `yerr` from an interval's bounds; 0 where a bound is
    missing or on the wrong side of the value (an interval clipped at a metric's limit)."""
    values, low, high = (pd.Series(s).astype(float).reset_index(drop=True) for s in (values, low, high))
    return np.vstack([(values - low).clip(lower=0).fillna(0).to_numpy(), (high - values).clip(lower=0).fillna(0).to_numpy()])


def _interval_label(summary: pd.DataFrame) -> str:
    """`95% interval of <what it covers>` (summary.csv `interval_covers`), the parenthesis on a line of its own."""
    covers = summary["interval_covers"].dropna().iloc[0] if "interval_covers" in summary and summary["interval_covers"].notna().any() else "validation images"
    return "95% interval of " + _on_lines(covers)


def _on_lines(covers: str) -> str:
    """What an interval covers, for a title: its parenthesis on a line of its own."""
    return covers.replace(" (", "\n(")


MAX_PAIRS_DRAWN = 40  # beyond this, the best model against each other one (every pair is in pairs.csv)


def pairs_to_draw(pairs: pd.DataFrame, best: str | None) -> tuple[pd.DataFrame, str]:
    """Every pair when they are few; with many models (40 make 780 pairs, a 275-inch figure that
    took most of the end of such a run), the pairs of the best-ranked model, and a title saying so."""
    rows = pairs.dropna(subset=["diff"])
    if len(rows) <= MAX_PAIRS_DRAWN or best is None:
        return rows, "pairwise differences"
    mine = rows[(rows["model_a"] == best) | (rows["model_b"] == best)].head(MAX_PAIRS_DRAWN)
    return mine, f"{best} against each other model ({len(mine)} of {len(rows)} pairs; all in pairs.csv)"


def plot_pair_differences(ax, pairs: pd.DataFrame, best: str | None = None):
    """A forest plot: each pair's difference in the ranking metric with its 95% interval, the
    better of the pair first (as the verdict names it); supported pairs are drawn solid. The title
    says what the intervals cover and what "supported" takes: Holm's adjustment across the pairs
    (an interval of its own can exclude zero without it), and with one seed nothing is."""
    rows, title = pairs_to_draw(better_first(pairs), best)
    rows = rows.iloc[::-1]
    y = np.arange(len(rows))
    supported = rows["supported"].astype(bool).to_numpy()
    for colour, keep in (("tab:blue", supported), ("0.6", ~supported)):
        ax.errorbar(
            rows["diff"][keep], y[keep],
            xerr=np.vstack([(rows["diff"] - rows["diff_low"])[keep].clip(lower=0), (rows["diff_high"] - rows["diff"])[keep].clip(lower=0)]),
            fmt="o", color=colour, capsize=4,
        )
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(y, [f"{a} - {b}" for a, b in zip(rows["model_a"], rows["model_b"])])
    ax.set_xlabel(f"difference in {rows['metric'].iloc[0] if len(rows) else 'metric'} (better - worse), 95% interval")
    ax.set_title(f"{title} (solid: supported, grey: not)" + _pairs_note(pairs.dropna(subset=["diff"])), fontsize=10)  # Holm: over all, not the drawn
    ax.grid(axis="x", alpha=0.3)
    return ax


def _pairs_note(rows: pd.DataFrame) -> str:
    """The lines under a forest plot's title: what its intervals cover, and what supports a pair
    (`rows`: every pair with a difference, also those a plot of many leaves out)."""
    covers = rows["covers"].dropna() if "covers" in rows else pd.Series(dtype=object)
    if not len(covers):
        return ""
    note = "\n95% intervals of " + _on_lines(str(covers.iloc[0]))
    if not covers_training(covers.iloc[0]):
        return note + ": none is supported"
    tested = holm_tested(rows)
    return note + f"\nsupported: Holm-adjusted across {tested} pair{'s' if tested != 1 else ''} (a bar clear of 0 may not be)"


def pareto_front(points: pd.DataFrame, cost: str, quality: str, higher_is_better: bool = True) -> pd.DataFrame:
    """The models no other model beats on both cost (lower) and quality, sorted by cost."""
    data = points.dropna(subset=[cost, quality]).sort_values([cost, quality], ascending=[True, not higher_is_better])
    front, best = [], None
    for _, row in data.iterrows():
        q = row[quality] if higher_is_better else -row[quality]
        if best is None or q > best:
            front.append(row)
            best = q
    return pd.DataFrame(front)


def plot_quality_vs_cost(ax, summary: pd.DataFrame, cost: str, quality: str):
    higher = higher_is_better(quality)
    data = summary.dropna(subset=[cost, quality])
    colours = model_colours(list(summary["model"]))
    ax.scatter(data[cost], data[quality], s=60, color=[colours[m] for m in data["model"]], zorder=3)
    title, bars_said = f"{quality} vs {cost}", ""
    if f"{quality}_low" in data and len(data):
        # The front joins the values; a model off it may be as good within its interval.
        bars = _interval_bars(data, quality)
        for i, (model, x, y) in enumerate(zip(data["model"], data[cost], data[quality])):  # one colour each: errorbar takes one
            ax.errorbar([x], [y], yerr=bars[:, i : i + 1], fmt="none", ecolor=colours[model], capsize=4, alpha=0.6, zorder=2)
        bars_said = "\nbars: " + _interval_label(data)
    front = pareto_front(data, cost, quality, higher)
    if len(front) == 1:  # no line to draw: the title said "dashed" over a plot without a dash
        title += f" (the Pareto front: {front['model'].iloc[0]} alone, none cheaper or better)"
    elif len(front):
        # Named in the title, not a legend: a legend box covered the top model's interval bar.
        ax.plot(front[cost], front[quality], linestyle="--", color="grey", zorder=2)
        title += " (dashed: the Pareto front)" + _unsupported_gains(front)
    ax.set_xlabel(cost)
    ax.set_ylabel(quality)
    if cost in ("params", "flops_per_example"):
        counts_axis(ax, data[cost])
    ax.get_xlim()  # settles the limits, which matplotlib computes lazily: before it, the transform below is of (0, 1)
    to_axes = ax.transData + ax.transAxes.inverted()  # once the scale and limits are set: where each point lies across the axes
    across = to_axes.transform(data[[cost, quality]].to_numpy(float)) if len(data) else np.empty((0, 2))
    for names, at, (x, _) in named_together(list(data["model"]), list(zip(data[cost], data[quality])), across):
        left = x > 0.6  # a name to the right would run out of the axes
        ax.annotate(", ".join(names), at, xytext=(-5 if left else 5, 4), textcoords="offset points", ha="right" if left else "left")
    ax.set_title(title + bars_said, fontsize=10)
    ax.grid(alpha=0.3)
    return ax


def _unsupported_gains(front: pd.DataFrame) -> str:
    """With repeats, how many of the front's steps (the next costlier model, better on the means)
    are differences the ranking does not support: there the costlier model may be no better.
    Empty with one seed (no pair is supported; the bars say what they cover) or a front of one."""
    if "indistinguishable_from" not in front or len(front) < 2:
        return ""
    peers = [set(filter(None, p.split(", "))) if isinstance(p, str) else set() for p in front["indistinguishable_from"]]
    names = list(front["model"])
    compared = [not none_finished(s) for s in front["status"]] if "status" in front else [True] * len(names)  # a race's dropped: no pairs
    unsupported = sum(names[i + 1] in peers[i] or not (compared[i] and compared[i + 1]) for i in range(len(names) - 1))
    if unsupported == 0:
        return ""
    if len(names) == 2:
        return "\nits gain not supported: the costlier model may be no better"
    return f"\n{unsupported} of {len(names) - 1} gains along it not supported: a costlier model there may be no better"


NEAR = 0.05  # of the axes, either way: about a line of a name's text on a third of a figure


def named_together(names: list[str], points: list, across) -> list[tuple[list[str], Any, Any]]:
    """(names, the highest point, where it lies across the axes) for points within NEAR of one
    another, highest first: a learning-rate grid's models share their params and serving cost,
    and benchmark.yaml's names were drawn over each other where two scored within 0.002."""
    groups: list[list] = []  # [names, the highest point, where it lies across the axes, the lowest one's height]
    for i in sorted(range(len(names)), key=lambda i: -across[i][1]):
        x, y = across[i]
        home = next((g for g in groups if abs(g[2][0] - x) < NEAR and g[3] - y < NEAR), None)
        if home is None:
            groups.append([[names[i]], points[i], across[i], y])
        else:
            home[0].append(names[i])
            home[3] = y
    return [(names_, point, where) for names_, point, where, _ in groups]


def plot_expected_best(table: pd.DataFrame):
    """Expected best score against the tuning budget, one line per compare_by group with a band of
    one standard deviation (Dodge et al. 2019): validation, and with a test split the test score
    of the model those trials would choose."""
    panels = [("expected_best", "chosen_by", "expected best on validation")]
    if "expected_reported" in table:
        panels.append(("expected_reported", "reported", "expected test score of the model chosen on validation"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    colours = model_colours(list(dict.fromkeys(table["group"])))
    for ax, (value, metric, title) in zip(axes[0], panels):
        for group, rows in table.groupby("group", sort=False):
            mean, spread = rows[value].to_numpy(), rows[f"{value}_std"].to_numpy()
            ax.plot(rows["trials"], mean, marker="o", color=colours[group], label=f"{group} ({len(rows)} trials)")
            ax.fill_between(rows["trials"], mean - spread, mean + spread, color=colours[group], alpha=0.15)
        ax.set_xlabel("trials (models tried in the group)")
        ax.set_ylabel(str(table[metric].iloc[0]))
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_title(f"{title}, by tuning budget\nshaded: one standard deviation of the best of that many trials either way", fontsize=10)
        ax.grid(alpha=0.3)
        place_legend(ax, fontsize=8)
    fig.tight_layout()
    return fig


def plot_samples(images: np.ndarray, masks: np.ndarray, predictions: dict[str, np.ndarray], title: str = "validation samples: the same images for every model",
                 reconstructions: frozenset[str] = frozenset()):
    """A figure: one row per validation image: image, true mask, each model's prediction (those in
    `reconstructions`, autoencoders', shown as images: told by kind, not by channels, since 3
    classes and RGB images have as many). With only reconstructions, no true mask: the image is
    their target."""
    rebuilds = {name: name in reconstructions for name in predictions}
    truth = not predictions or not all(rebuilds.values())
    rows, columns = len(images), 1 + truth + len(predictions)
    fig, axes = plt.subplots(rows, columns, figsize=(2.1 * columns, 2.1 * rows), squeeze=False)
    classes = max(2, masks.shape[-1])  # class ids 0..classes-1; a binary mask's one channel is 2
    masks_shown = _class_colours(classes)
    for r in range(rows):
        panels = [("image", images[r], None)] + ([("truth", mask_classes(masks[r]), masks_shown)] if truth else [])
        for name, pred in predictions.items():
            panels.append((name, pred[r], None) if rebuilds[name] else (name, mask_classes(pred[r]), masks_shown))
        for c, (heading, picture, cmap) in enumerate(panels):
            ax = axes[r][c]
            # One scale for every panel: class k is one colour in the truth and in each prediction.
            ax.imshow(np.clip(picture, 0, 1) if cmap is None else picture, cmap=cmap, vmin=0 if cmap is None else -0.5, vmax=1 if cmap is None else classes - 0.5)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(heading, fontsize=9)
    ignored = truth and any(np.isnan(mask_classes(m)).any() for m in masks)
    fig.suptitle(title + ("; grey: pixels of data.ignore_label, in no score" if ignored else ""))
    if classes > 2 and not all(rebuilds.values()):
        patches = [matplotlib.patches.Patch(facecolor=masks_shown(k), edgecolor="0.3", label=f"class {k}") for k in range(1, classes)]
        fig.legend(handles=patches, loc="lower center", ncol=min(len(patches), 8), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(patches) - 1) // 8), 1, 1))
    else:
        fig.tight_layout()
    return fig


def _class_colours(classes: int):
    """The masks' colour map, indexed by class id: binary black and white; with more classes,
    black background and one hue per class (grey levels for 3 or more classes are hard to tell
    apart): tab10's nine that are not grey (an ignored pixel, NaN, is mid grey), for more classes
    turbo's, past its near-black end."""
    if classes <= 2:
        colours = ["black", "white"]
    else:
        hues = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7]
        colours = ["black", *(hues if classes - 1 <= len(hues) else matplotlib.colormaps["turbo"](np.linspace(0.1, 1.0, classes - 1)))][:classes]
    return matplotlib.colors.ListedColormap(colours).with_extremes(bad="0.55")


def save_figure(fig, folder: Path, stem: str, formats=("png",)) -> list[Path]:
    """The figure as `stem.<format>` for each format (PNG first), closed after."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.{kind}" for kind in formats]
    for path in paths:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths


def plot_learning_rates(ax, losses: pd.DataFrame):
    """Each model's learning rate per step (the `lr` train rows): warmups and decays side by side,
    and where a member stopped, was dropped or diverged (its curve ends there)."""
    curves = merge_identical(_per_model(losses, "train", "lr"))
    colours = model_colours(list(curves))
    for model, stats in curves.items():
        ax.plot(stats.index, stats["mean"], color=colours[model], linewidth=1.8, label=model)
    _mark_departures(ax, {m: (s.index, s["mean"]) for m, s in curves.items()}, colours)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_ylabel("learning rate")
    log_axis(ax, "y")
    ax.set_title("learning rate per step")
    ax.grid(alpha=0.3)
    if curves:
        place_legend(ax, fontsize=8)
    return ax


def figure_loss_curves(common_rows: pd.DataFrame, log_scale: bool, compared_on: str | None):
    """`common_rows`: tables.common_loss_rows (each member's loss on the common loss)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    plot_loss_curves(ax, common_rows, log_scale, compared_on=compared_on)
    return fig


def figure_learning_rates(rates: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    plot_learning_rates(ax, rates)
    return fig


def figure_pair_differences(pairs: pd.DataFrame, best: str | None):
    fig, ax = plt.subplots(figsize=(7.5, 1.6 + 0.35 * len(pairs_to_draw(pairs, best)[0])))
    plot_pair_differences(ax, pairs, best)
    return fig


def figure_val_metrics(val_rows: pd.DataFrame, metrics: list[str]):
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        plot_val_metric(ax, val_rows, metric)
    fig.tight_layout()
    return fig


def figure_final(summary: pd.DataFrame, quality: str, seeds: pd.DataFrame | None = None):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    plot_final_bars(ax, summary, quality, seeds)
    return fig


def figure_quality_vs_cost(summary: pd.DataFrame, quality: str, costs: list[str]):
    fig, axes = plt.subplots(1, len(costs), figsize=(6 * len(costs), 4.2), squeeze=False)
    for ax, cost in zip(axes[0], costs):
        plot_quality_vs_cost(ax, summary, cost, quality)
    fig.tight_layout()
    return fig


def draw(job, folder: Path, formats=("png",)) -> Path:
    """A `figures.FigureJob` drawn and saved: plots/<stem>.png (and each other format)."""
    figure = globals()[job.figure]
    return save_figure(figure(*job.args), folder, job.stem, formats)[0]


def save_plots(folder: Path, losses: pd.DataFrame, summary: pd.DataFrame, rank_by: str, log_scale: bool, pairs: pd.DataFrame | None = None, compared_on: str | None = None, members: set[str] | None = None, formats=("png",)) -> list[Path]:
    """The standard set, drawn here one after another (a run draws them in its output
    processes: outputs/derived.py); returns the PNG paths (other formats are written beside them)."""
    jobs = curve_figures(losses, log_scale, compared_on, members) + summary_figures(summary, rank_by, pairs)
    return [draw(job, folder, formats) for job in jobs]
