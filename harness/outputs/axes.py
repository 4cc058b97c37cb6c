"""The plots' axes: tick labels in one compact style ("881", "20k", "1.5M") and the scale of an
axis of counts. Tick formatting only (matplotlib.ticker): no figure, no backend."""

from __future__ import annotations

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
    leave one or two: all or a subset of them within a decade, 2s and 5s within two."""
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(_CompactLogLabels())
    axis.set_minor_formatter(_CompactLogLabels(minor=True))


class _CompactLogLabels(matplotlib.ticker.LogFormatter):
    """matplotlib's choice of which log ticks get a label (every decade; between them all, or a
    subset where the axis crosses one or two decades), that subset's 2-3-4-6 thinned to 2-5 (it
    runs together on a third of a figure), each label written by `compact_number`."""

    def __init__(self, minor: bool = False):
        super().__init__(labelOnlyBase=False, minor_thresholds=(2, 0.5) if minor else (1, 0.4))

    def set_locs(self, locs=None):
        super().set_locs(locs)
        if self._sublabels is not None and len(self._sublabels) not in (1, 10):  # not the decades alone ({1}) nor all (1-10): the subset
            self._sublabels = {1, 2, 5, 10}

    def __call__(self, x, pos=None):
        return compact_number(x) if super().__call__(x, pos) else ""


def compact_number(value: float) -> str:
    """A tick label: 881 -> "881", 20000 -> "20k", 1500000 -> "1.5M", 0.25 -> "0.25", 0.001 -> "1e-03"."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}" if value == 0 or abs(value) >= 0.01 else f"{value:.0e}"
