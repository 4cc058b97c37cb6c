"""How sure a ranking is: intervals for each member's score and for each pair's difference.

Every member is scored on the same validation images and trained on the same batches, so every
comparison is paired:

- one seed: a paired bootstrap over validation images (scipy.stats.bootstrap, BCa). The images are
  resampled once per resample and every member is scored on that same resample, from its
  per-image counts (val_scores.csv), with the very function that gives its validation score; a
  pair's difference and the share of resamples in which one beats the other come from the same
  resamples;
- with `train.repeats`: seed i of every model saw the same batches, so per-seed differences are
  tested pairwise (scipy.stats.ttest_rel, and wilcoxon where the count allows), with Holm's
  correction across pairs.

A difference is "supported" when its 95% interval excludes zero (one seed) or its Holm-adjusted
p-value is below 0.05 (repeats); `indistinguishable_from` lists the models for which it is not.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from itertools import combinations
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

from harness.outputs.columns import higher_is_better

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0  # the same resamples every time a report is rebuilt
WILCOXON_MIN_SEEDS = 6  # with fewer, no two-sided signed-rank p-value can reach 0.05


@dataclass(frozen=True)
class Scored:
    """One member's per-image quantities [N, ...] and the function that turns their sums into scores."""

    quantities: dict[str, np.ndarray]
    scores: Callable[[dict, float], dict]


def bootstrap_metric(members: dict[str, Scored], metric: str, resamples: int = RESAMPLES, seed: int = SEED):
    """(per-member table, per-pair table) for `metric` (e.g. "iou", "loss"), on shared resamples.

    members: name -> Scored, all on the same N images in the same order."""
    names = [n for n, s in members.items() if metric in s.scores({k: v[:1].sum(0) for k, v in s.quantities.items()}, 1)]
    if len(names) == 0:
        return pd.DataFrame(), pd.DataFrame()
    count = len(next(iter(members[names[0]].quantities.values())))
    pairs = list(combinations(range(len(names)), 2))

    def values_on(indices):
        indices = np.atleast_2d(indices)  # [resamples, N]
        weights = np.zeros((len(indices), count))
        np.add.at(weights, (np.arange(len(indices))[:, None], indices), 1.0)
        out = []
        for name in names:
            scored = members[name]
            totals = {k: np.tensordot(weights, v, axes=(1, 0)) for k, v in scored.quantities.items()}
            out.append(scored.scores(totals, count)[metric])
        return np.stack(out)  # [members, resamples]

    def statistic(indices, axis=-1):
        values = values_on(indices)
        differences = [values[a] - values[b] for a, b in pairs]
        out = np.concatenate([values, np.stack(differences)]) if differences else values
        return out[:, 0] if np.ndim(indices) == 1 else out  # scipy also asks for the observed value

    full = values_on(np.arange(count)[None, :])[:, 0]
    low, high, distribution = _bootstrap(statistic, count, resamples, seed)
    per_member = pd.DataFrame({"model": names, "value": full, "low": low[: len(names)], "high": high[: len(names)]})
    better = 1.0 if higher_is_better(f"val_{metric}") else -1.0
    rows = []
    for k, (a, b) in enumerate(pairs):
        d = better * distribution[len(names) + k]
        rows.append({
            "model_a": names[a], "model_b": names[b], "metric": f"val_{metric}",
            "diff": full[a] - full[b], "diff_low": low[len(names) + k], "diff_high": high[len(names) + k],
            "p_a_better": float(np.mean(d > 0) + 0.5 * np.mean(d == 0)),
        })
    per_pair = pd.DataFrame(rows)
    if len(per_pair):
        per_pair["supported"] = (per_pair["diff_low"] > 0) | (per_pair["diff_high"] < 0)
    return per_member, per_pair


def _bootstrap(statistic, count: int, resamples: int, seed: int):
    """(low, high, bootstrap distribution) of every value the statistic returns: BCa intervals,
    the percentile interval where BCa is undefined (a statistic that does not vary)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on degenerate statistics: handled below
        result = stats.bootstrap(
            (np.arange(count),), statistic, n_resamples=resamples, vectorized=True, confidence_level=CONFIDENCE,
            random_state=seed, batch=250, method="BCa",
        )
    low, high = result.confidence_interval
    tail = 100 * (1 - CONFIDENCE) / 2
    plow, phigh = np.percentile(result.bootstrap_distribution, [tail, 100 - tail], axis=-1)
    return np.where(np.isnan(low), plow, low), np.where(np.isnan(high), phigh, high), result.bootstrap_distribution


# ---------------------------------------------------------------------------------------------
# Repeats: paired across seeds


def t_interval(values) -> tuple[float, float]:
    """(standard deviation, half-width of the 95% Student-t interval of the mean)."""
    values = np.asarray(values, float)
    if len(values) < 2:
        return float("nan"), float("nan")
    sd = float(values.std(ddof=1))
    return sd, float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(values) - 1) * sd / np.sqrt(len(values)))


def paired_tests_across_seeds(per_seed: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Pairs of models over their common seeds: per_seed has columns model, seed, <metric>."""
    table = per_seed.pivot_table(index="seed", columns="model", values=metric, aggfunc="first")
    models = list(dict.fromkeys(per_seed["model"]))
    rows = []
    for a, b in combinations(models, 2):
        both = table[[a, b]].dropna()
        d = (both[a] - both[b]).to_numpy()
        row = {"model_a": a, "model_b": b, "metric": metric, "seeds": len(d), "diff": float(d.mean()) if len(d) else np.nan}
        _, half = t_interval(d)
        row["diff_low"], row["diff_high"] = row["diff"] - half, row["diff"] + half
        row["p_t"] = float(stats.ttest_rel(both[a], both[b]).pvalue) if len(d) >= 2 and np.ptp(d) > 0 else (1.0 if len(d) >= 2 and not d.any() else np.nan)
        row["p_wilcoxon"] = float(stats.wilcoxon(d).pvalue) if len(d) >= WILCOXON_MIN_SEEDS and d.any() else np.nan
        rows.append(row)
    pairs = pd.DataFrame(rows)
    if len(pairs):
        pairs["p_holm"] = holm(pairs["p_t"].to_numpy())
        pairs["supported"] = pairs["p_holm"] < 1 - CONFIDENCE
    return pairs


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjustment (controls the family-wise error rate); NaN stays NaN."""
    p = np.asarray(pvalues, float)
    adjusted = np.full_like(p, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid])]
    m = len(order)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def indistinguishable(models: list[str], pairs: pd.DataFrame) -> list[str]:
    """For each model, the models it cannot be told apart from (pairs whose difference is not supported)."""
    found: dict[str, list[str]] = {m: [] for m in models}
    for row in pairs.itertuples(index=False):
        if not row.supported and row.model_a in found and row.model_b in found:
            found[row.model_a].append(row.model_b)
            found[row.model_b].append(row.model_a)
    return [", ".join(found[m]) for m in models]
