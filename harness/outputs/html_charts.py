"""The report's interactive charts: inline SVG line charts drawn here, in Python, with their data
beside them, so the page's small script can show values under the pointer and hide a model when
its legend entry is clicked. No library, no network: the page works from a file, offline.

The same curves as plots/*.png (loss on the common loss, smoothed; validation metrics per epoch;
learning rates), kept at most MAX_POINTS points per curve so a long run's page stays small.
"""

from __future__ import annotations

import html
import json
import math

import numpy as np
import pandas as pd
from matplotlib.colors import to_hex
from matplotlib.ticker import MaxNLocator

from harness.outputs.plots import SMOOTHING, model_colours, _per_model, merge_identical
from harness.outputs.tables import charted_val_metrics, common_loss_rows

MAX_POINTS = 400
WIDTH, HEIGHT = 1000, 320
LEFT, RIGHT, TOP, BOTTOM = 84, 16, 12, 36  # the plot area's margins inside the viewBox


def report_charts(losses: pd.DataFrame, compared_on: str | None = None, members: set[str] | None = None) -> list[str]:
    """The charts of a run, each an HTML fragment (title, legend, SVG)."""
    charts = []
    train = _per_model(common_loss_rows(losses, members).assign(metric="loss"), "train", "loss")
    if train:
        smooth = {m: (s.index.to_numpy(), s["mean"].ewm(alpha=1 - SMOOTHING).mean().to_numpy()) for m, s in train.items()}
        charts.append(line_chart(f"training loss ({compared_on or 'each model its own'}), smoothed", smooth, "step", "train loss"))
    for metric in charted_val_metrics(losses):
        curves = _per_model(losses, "val", metric, x="epoch")
        title = f"validation common loss ({compared_on})" if metric == "compare_loss" else f"validation {metric}"
        charts.append(line_chart(title, {m: (s.index.to_numpy(), s["mean"].to_numpy()) for m, s in curves.items()}, "epoch", f"val {metric}", markers=True))
    rates = merge_identical(_per_model(losses, "train", "lr"))
    if rates:
        charts.append(line_chart("learning rate", {m: (s.index.to_numpy(), s["mean"].to_numpy()) for m, s in rates.items()}, "step", "learning rate", log_y=True))
    return charts


def line_chart(title: str, series: dict[str, tuple], x_label: str, y_label: str, log_y: bool = False, markers: bool = False) -> str:
    series = {m: _thin(np.asarray(x, float), np.asarray(y, float)) for m, (x, y) in series.items()}
    series = {m: (x[np.isfinite(y)], y[np.isfinite(y)]) for m, (x, y) in series.items()}
    if log_y:
        series = {m: (x[y > 0], y[y > 0]) for m, (x, y) in series.items()}
    points = [(x, y) for x, y in series.values() if len(x)]
    if not points:
        return ""
    x_lo, x_hi = min(x.min() for x, _ in points), max(x.max() for x, _ in points)
    y_lo, y_hi = min(y.min() for _, y in points), max(y.max() for _, y in points)
    scale_y = (lambda v: math.log10(v)) if log_y else (lambda v: v)
    y_lo_s, y_hi_s = scale_y(y_lo), scale_y(y_hi)
    if y_hi_s == y_lo_s:
        y_lo_s, y_hi_s = y_lo_s - 0.5, y_hi_s + 0.5
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5

    def px(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * (WIDTH - LEFT - RIGHT)

    def py(y: float) -> float:
        return TOP + (y_hi_s - scale_y(y)) / (y_hi_s - y_lo_s) * (HEIGHT - TOP - BOTTOM)

    colours = {m: to_hex(c) for m, c in model_colours(list(series)).items()}  # the PNG plots' colours, as CSS takes them
    last_x = x_hi
    body = [_axes(x_lo, x_hi, y_lo_s, y_hi_s, log_y, px, x_label, y_label)]
    data = {}
    for model, (x, y) in series.items():
        if not len(x):
            continue
        body.append(_series_svg(model, x, y, colours[model], px, py, markers, left_early=x[-1] < last_x))
        data[model] = {"x": [float(v) for v in x], "y": [float(v) for v in y], "colour": colours[model]}
    legend = "".join(
        f"<button type='button' class='legend-item' data-model='{html.escape(m)}'><span style='background:{colours[m]}'></span>{html.escape(m)}</button>"
        for m in data
    )
    frame = {"x0": x_lo, "x1": x_hi, "left": LEFT, "right": WIDTH - RIGHT, "width": WIDTH, "xLabel": x_label}
    return (
        f"<figure class='chart' data-chart='{html.escape(json.dumps(frame))}'>"
        f"<figcaption>{html.escape(title)} <small>(hover for values; click a model to hide it)</small></figcaption>"
        f"<div class='legend'>{legend}</div>"
        f"<div class='chart-area'><svg viewBox='0 0 {WIDTH} {HEIGHT}' role='img' aria-label='{html.escape(title)}'>"
        f"{''.join(body)}<line class='guide' x1='0' x2='0' y1='{TOP}' y2='{HEIGHT - BOTTOM}' visibility='hidden'/></svg>"
        f"<div class='tip' hidden></div></div>"
        f"<script type='application/json' class='chart-data'>{_json_for_script(data)}</script></figure>"
    )


def _series_svg(model: str, x, y, colour: str, px, py, markers: bool, left_early: bool) -> str:
    """One model's line (and points); a cross where it left the run early (stopped, dropped, diverged)."""
    coords = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x, y))
    parts = [f"<polyline points='{coords}' fill='none' stroke='{colour}' stroke-width='2'/>"]
    if markers:
        parts += [f"<circle cx='{px(a):.1f}' cy='{py(b):.1f}' r='3' fill='{colour}'/>" for a, b in zip(x, y)]
    if left_early:
        cx, cy = px(x[-1]), py(y[-1])
        parts.append(f"<path d='M{cx - 5:.1f},{cy - 5:.1f}L{cx + 5:.1f},{cy + 5:.1f}M{cx - 5:.1f},{cy + 5:.1f}L{cx + 5:.1f},{cy - 5:.1f}' stroke='black' stroke-width='2'><title>{html.escape(model)} left the run here</title></path>")
    return f"<g class='series' data-model='{html.escape(model)}'>{''.join(parts)}</g>"


def _axes(x_lo, x_hi, y_lo, y_hi, log_y, px, x_label, y_label) -> str:
    parts = [f"<rect x='{LEFT}' y='{TOP}' width='{WIDTH - LEFT - RIGHT}' height='{HEIGHT - TOP - BOTTOM}' fill='none' stroke='#ccc'/>"]
    for value in np.linspace(y_lo, y_hi, 5):
        y = TOP + (y_hi - value) / (y_hi - y_lo) * (HEIGHT - TOP - BOTTOM)
        text = f"{10 ** value:.2g}" if log_y else f"{value:.3g}"
        parts.append(f"<line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y:.1f}' y2='{y:.1f}' stroke='#eee'/><text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end'>{text}</text>")
    for value in _whole_ticks(x_lo, x_hi):
        parts.append(f"<text x='{px(value):.1f}' y='{HEIGHT - BOTTOM + 16}' text-anchor='middle'>{value:.4g}</text>")
    parts.append(f"<text x='{(LEFT + WIDTH - RIGHT) / 2}' y='{HEIGHT - 4}' text-anchor='middle'>{html.escape(x_label)}</text>")
    parts.append(f"<text x='12' y='{(TOP + HEIGHT - BOTTOM) / 2}' text-anchor='middle' transform='rotate(-90 12 {(TOP + HEIGHT - BOTTOM) / 2})'>{html.escape(y_label)}</text>")
    return "<g class='axes'>" + "".join(parts) + "</g>"


def _whole_ticks(lo: float, hi: float) -> list[float]:
    """Up to 6 round, whole-number ticks within [lo, hi]: steps and epochs are counted, not
    measured (no tick at step 40.8 or epoch 1.4)."""
    ticks = [float(t) for t in MaxNLocator(nbins=6, integer=True).tick_values(lo, hi) if lo - 1e-9 <= t <= hi + 1e-9]
    return [t for t in ticks if t == round(t)] or [lo, hi]


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most MAX_POINTS points, evenly spaced, always keeping the last one (where a curve ends
    matters: a member that left the run)."""
    if len(x) <= MAX_POINTS:
        return x, y
    keep = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).round().astype(int))
    return x[keep], y[keep]


def _json_for_script(data) -> str:
    # Inside <script>, "</" would end the element: escape it (model names are the user's text).
    return json.dumps(data).replace("</", "<\\/")
