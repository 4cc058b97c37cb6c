"""Seeds far from their model's other seeds: one that trained far worse (or better) than the rest.

Three seeds cannot tell such a seed from spread (one seed's others are two values: one degree of
freedom), and on real networks they are common enough that three seeds' spread covers less than
it says (docs/comparing.md, "Why one t quantile for both parts"). With 5 seeds or more each seed is
held against a prediction interval from the model's others: the externally studentised residual

    t = (x_i - mean of the others) / (std of the others * sqrt(1 + 1 / (R - 1)))

is Student-t with R - 2 degrees of freedom when seeds vary normally, and its two-sided p-values
are Holm-adjusted across the model's R seeds, so that a model whose seeds vary normally has a seed
named about 5% of the time (measured: tests/test_statistics.py). A seed named stays in its
model's score and interval: a seed that now and then trains far better or worse than the others is
part of what the model is; its curves say whether something went wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.outputs.statistics import holm

MIN_SEEDS = 5
ALPHA = 0.05


@dataclass(frozen=True)
class UnusualSeed:
    member: str  # `unet@2`
    value: float
    others_low: float  # the range of the model's other seeds
    others_high: float
    p_holm: float

    def describe(self) -> str:
        """`unet@2 0.4410 (its others 0.5860-0.6560, p_holm 0.004)`, with as many decimals as tell
        the others' lowest from their highest (a loss near 0.012 whose seeds differ by 1e-4)."""
        spread = self.others_high - self.others_low
        decimals = min(8, max(4, 1 - math.floor(math.log10(spread)))) if spread > 0 else 4
        p = "p_holm < 0.001" if self.p_holm < 0.001 else f"p_holm {self.p_holm:.3f}"
        return f"{self.member} {self.value:.{decimals}f} (its others {self.others_low:.{decimals}f}-{self.others_high:.{decimals}f}, {p})"


def unusual_seeds(members: list[str], values) -> list[UnusualSeed]:
    """The seeds of one model (`members`, their `values` of one score) far from the others (about
    5% of the time for seeds that vary normally); none with fewer than MIN_SEEDS finite values."""
    x = np.asarray(values, float)
    keep = np.isfinite(x)
    names, x = [m for m, k in zip(members, keep) if k], x[keep]
    if len(x) < MIN_SEEDS:
        return []
    p = holm(_leave_one_out_p(x))
    return [UnusualSeed(names[i], float(x[i]), float(np.delete(x, i).min()), float(np.delete(x, i).max()), float(p[i]))
            for i in np.flatnonzero(p < ALPHA)]


def _leave_one_out_p(x: np.ndarray) -> np.ndarray:
    """Each seed's two-sided p-value against a prediction from the others (t, R - 2 degrees of freedom)."""
    from scipy import stats

    count = len(x)
    others = np.broadcast_to(x, (count, count))[~np.eye(count, dtype=bool)].reshape(count, count - 1)  # row i: all but seed i
    spread, gap = others.std(axis=1, ddof=1), x - others.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = gap / (spread * math.sqrt(1 + 1 / (count - 1)))
    p = 2 * stats.t.sf(np.abs(t), count - 2)
    # Others that agree exactly (a model stuck at one score): any other value stands out.
    return np.where(spread == 0, np.where(gap == 0, 1.0, 0.0), p)
