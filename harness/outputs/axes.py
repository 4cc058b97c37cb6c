"""The plots' axes: tick labels in one compact style ("881", "20k", "1.5M") and the scale of an
axis of counts. Tick formatting only (matplotlib.ticker): no figure, no backend."""

from __future__ import annotations

import math

import matplotlib.ticker
import pandas as pd


def counts_axis(ax, values: pd.Series) -> None:
    """An x axis of counts (params, FLOPs): log where they span a decade or more (a grid of widths);
    linear within less, where a log axis has no tick between 10M and 20M (backbones of 8-14M got
    the labels 8M 9M 10M and none beside their points), both labelled "8M", "12M", "1.5G"."""
    if values.min() > 0 and values.max() / values.min() >= 10:
        log_axis(ax, "x")
    else:
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, pos: compact_number(x)))


def log_axis(ax, which: str) -> None:
    """A log scale on `which` ("x" or "y") whose tick labels are plain text in one style ("5k",
    "20k", "1.5M", "0.2", "1e-03"): by default matplotlib writes them as mathtext, whose first use
    in a process loads its fonts (0.4 s of smoke's 2.7-s end of run), and its plain formatter
    mixes "6000" with "2e+04" on one axis. Minor ticks get labels where the decades alone would
    leave one or two: all of them within a decade, 2s and 5s within two."""
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(_CompactLogLabels(most_decade_ticks=1, every_tick_within=0.4))
    axis.set_minor_formatter(_CompactLogLabels(most_decade_ticks=2, every_tick_within=0.5))


class _CompactLogLabels(matplotlib.ticker.Formatter):
    """Which log ticks get a label, by a rule of our own: every decade; between decades, where the
    view holds at most `most_decade_ticks` of them, the 2s and 5s, or every tick where the view
    spans less than `every_tick_within` decades; each label written by `compact_number`.
    matplotlib's LogFormatter makes the same kind of choice, but by a rule that changed between its
    versions (3.10 counts the decades the view spans, 3.11 the decade ticks within it: on a plot
    of 881 to 58.8k params one labelled 2k 5k 20k 50k and the other nothing between 1k and 10k)."""

    def __init__(self, most_decade_ticks: int, every_tick_within: float):
        self.most_decade_ticks, self.every_tick_within = most_decade_ticks, every_tick_within
        self.labelled = {1}  # the leading digits that get a label; set by set_locs from the view

    def set_locs(self, locs):
        low, high = sorted(self.axis.get_view_interval())
        if not (low > 0 and math.isfinite(high)):
            self.labelled = {1}
            return
        lowest, highest = math.log10(low), math.log10(high)
        # nextafter: a view that starts exactly at a decade holds that decade's tick
        decade_ticks = math.floor(highest) - math.floor(math.nextafter(lowest, -math.inf))
        if decade_ticks > self.most_decade_ticks:
            self.labelled = {1}
        elif highest - lowest > self.every_tick_within:
            self.labelled = {1, 2, 5}
        else:
            self.labelled = set(range(1, 10))

    def __call__(self, x, pos=None):
        if not (x > 0 and math.isfinite(x)):
            return ""
        exponent = math.floor(math.log10(x) + 1e-9)  # 1e-9: log10(1000) may come out 2.9999999999999996
        return compact_number(x) if round(x / 10**exponent) in self.labelled else ""


def compact_number(value: float) -> str:
    """A tick label: 881 -> "881", 20000 -> "20k", 1500000 -> "1.5M", 0.25 -> "0.25", 0.001 -> "1e-03"."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}" if value == 0 or abs(value) >= 0.01 else f"{value:.0e}"
