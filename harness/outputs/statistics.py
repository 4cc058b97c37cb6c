"""How sure a ranking is: intervals for each model's score and each pair's difference, and
what each interval covers.

Two sources of noise move a comparison, and they are not the same size:

- **validation-image noise**: the validation set is a sample of images. Every member is scored on
  the same images, so a paired bootstrap over images (scipy.stats.bootstrap, BCa) answers "would
  these two trained networks rank the same on other images?";
- **training randomness**: initial weights, data order, augmentation draws. Only repeats measure
  it (`train.repeats`: repeat r of every model shares a training seed, so differences are paired
  within each repeat). Across seeds a difference typically moves several times more than image
  resampling suggests.

With one training seed only the first is measured: intervals say so (`covers`), and no
difference is called supported (`supported` is False; `beyond_image_noise` keeps what the image
bootstrap says about these two trained networks). With R >= 2 repeats, a model's score is the mean
over its seeds and a pair's difference the mean of its per-seed differences; the interval's
variance is the seed-to-seed variance / R plus the image-bootstrap variance of that mean, with a
Student-t of R - 1 degrees of freedom. Its
p-value is adjusted with Holm's method across all pairs; "supported" means p_holm < 0.05. With
`output.equivalence_margin` each pair is also tested for a difference inside the margin, on the
same variance (`mark_equivalence`): not supported means uncertain, equivalent means small.
Calibration is measured, not argued: `harness bench --section calibration`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from itertools import combinations
from typing import Callable

import numpy as np
import pandas as pd

from harness.config import metrics
from harness.config.metrics import SPLIT_WORDS, higher_is_better

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0  # the same resamples every time a report is rebuilt
POWER = 0.80  # repeats_to_resolve: repeats whose run would support a difference 80% of the time
MAX_REPEATS = 1000
RESOLVE_QUADRATURE = 64  # quantiles of each of the truth's two unknowns: the seed spread, the difference


def _scipy_stats():
    """scipy.stats, imported when a statistic is first computed: a third of a second of imports
    that a process which only trains (a group's worker, a run killed before its end) never uses."""
    from scipy import stats

    return stats


def images_only(split: str = "val") -> str:
    return f"{SPLIT_WORDS[split]} images only (one training seed: training randomness not measured)"


def seeds_and_images(split: str = "val", resampled: bool = False) -> str:
    """`resampled`: each seed trained on its own bootstrap of the training set (data.bootstrap_train)."""
    return f"training seeds, {RESAMPLED} and {SPLIT_WORDS[split]} images" if resampled else f"training seeds and {SPLIT_WORDS[split]} images"


def seeds_only(resampled: bool = False) -> str:
    return f"training seeds{' and ' + RESAMPLED if resampled else ''} (no per-image basis for this metric)"


RESAMPLED = "training-set bootstraps"
IMAGES_ONLY = images_only("val")
SEEDS_AND_IMAGES = seeds_and_images("val")


def covers_training(covers: str) -> bool:
    """Whether an interval described by `covers` accounts for training randomness."""
    return isinstance(covers, str) and covers.startswith("training seeds")


@dataclass(frozen=True)
class Scored:
    """One member's per-image quantities [N, ...] and the function that turns their sums into scores."""

    quantities: dict[str, np.ndarray]
    scores: Callable[[dict, float], dict]


def _scoring(members: dict[str, Scored], metric: str):
    """(names of the members that report `metric`, image count, f(indices [resamples, N]) ->
    values [members, resamples]): every member scored on the same resampled images."""
    names = [n for n, s in members.items() if metric in s.scores({k: v[:1].sum(0) for k, v in s.quantities.items()}, 1)]
    if not names:
        return names, 0, None
    count = len(next(iter(members[names[0]].quantities.values())))

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

    return names, count, values_on


def bootstrap_metric(members: dict[str, Scored], metric: str, resamples: int = RESAMPLES, seed: int = SEED, split: str = "val",
                     compared: Callable[[str, str], bool] | None = None):
    """One training seed: (per-member table, per-pair table) for `metric` (e.g. "iou", "loss"), a
    paired bootstrap over validation images. The intervals cover image noise only, so no pair is
    `supported`; `beyond_image_noise` says whether its interval excludes zero.

    members: name -> Scored, all on the same N images in the same order; compared: which pairs
    (a, b) to compare (default: every pair)."""
    names, count, values_on = _scoring(members, metric)
    if not names:
        return pd.DataFrame(), pd.DataFrame()
    pairs = [(a, b) for a, b in combinations(range(len(names)), 2) if compared is None or compared(names[a], names[b])]

    def statistic(indices, axis=-1):
        values = values_on(indices)
        differences = [values[a] - values[b] for a, b in pairs]
        out = np.concatenate([values, np.stack(differences)]) if differences else values
        return out[:, 0] if np.ndim(indices) == 1 else out  # scipy also asks for the observed value

    full = values_on(np.arange(count)[None, :])[:, 0]
    low, high, distribution = _bootstrap(statistic, count, resamples, seed)
    per_member = pd.DataFrame({"model": names, "value": full, "low": low[: len(names)], "high": high[: len(names)]})
    column = f"{split}_{metric}"
    better = 1.0 if higher_is_better(column) else -1.0
    rows = []
    for k, (a, b) in enumerate(pairs):
        d = better * distribution[len(names) + k]
        low_k, high_k = low[len(names) + k], high[len(names) + k]
        rows.append({
            "model_a": names[a], "model_b": names[b], "metric": column,
            "diff": full[a] - full[b], "diff_low": low_k, "diff_high": high_k, "covers": images_only(split),
            "supported": False, "beyond_image_noise": bool(low_k > 0 or high_k < 0),
            "p_a_better": float(np.mean(d > 0) + 0.5 * np.mean(d == 0)) if not np.isnan(d).all() else math.nan,
        })
    return per_member, pd.DataFrame(rows)


def image_draws(members: dict[str, Scored], metric: str, resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, np.ndarray]:
    """member -> its `metric` on each of `resamples` image resamples, the same resamples for every
    member (the image noise of means and differences over seeds follows from them)."""
    names, count, values_on = _scoring(members, metric)
    if not names:
        return {}
    indices = np.random.default_rng(seed).integers(0, count, (resamples, count))
    values = np.concatenate([values_on(chunk) for chunk in np.array_split(indices, max(1, resamples // 250))], axis=1)
    return dict(zip(names, values))


def _bootstrap(statistic, count: int, resamples: int, seed: int):
    """(low, high, bootstrap distribution) of every value the statistic returns: BCa intervals,
    the percentile interval where BCa is undefined (a statistic that does not vary). Over fewer
    than two images there is nothing to resample: every bound and draw is NaN (no interval)."""
    if count < 2:
        unknown = np.full(len(statistic(np.arange(count))), np.nan)
        return unknown, unknown.copy(), unknown[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on degenerate statistics: handled below
        result = _scipy_stats().bootstrap(
            (np.arange(count),), statistic, n_resamples=resamples, vectorized=True, confidence_level=CONFIDENCE,
            random_state=seed, batch=250, method="BCa",
        )
    low, high = result.confidence_interval
    tail = 100 * (1 - CONFIDENCE) / 2
    plow, phigh = np.percentile(result.bootstrap_distribution, [tail, 100 - tail], axis=-1)
    return np.where(np.isnan(low), plow, low), np.where(np.isnan(high), phigh, high), result.bootstrap_distribution


# ---------------------------------------------------------------------------------------------
# Repeats: training randomness and image noise together


@dataclass(frozen=True)
class SeedInterval:
    """A mean over seeds with an interval covering seed-to-seed variation and image noise."""

    mean: float
    seed_std: float  # seed-to-seed standard deviation of the values
    image_se: float  # standard error of the mean from image resampling (0: not measured)
    low: float
    high: float
    df: float
    p: float  # two-sided, against zero


def seed_interval(values, image_se: float = 0.0, bounds: tuple[float, float] | None = None) -> SeedInterval:
    """The mean of per-seed `values` with its 95% interval: variance s^2/R + image_se^2, Student-t
    with R - 1 degrees of freedom. (Welch-Satterthwaite would raise them as the image part grows,
    and with few seeds that made the interval narrower than the seeds' alone: not taken. Nor the
    image part's own normal quantile in quadrature: on real networks the seed part alone covers
    less than it says, seed effects having outliers, and the t on the image part absorbs it:
    docs/comparing.md, "Why one t quantile for both parts".)

    `bounds`: the range the true mean lies in (IoU: [0, 1]); the interval is cut to it. Its
    coverage is unchanged (a value it loses is one the true mean cannot take), and it no longer
    reports an IoU of -0.27, which a t-interval over three spread-out seeds otherwise does."""
    values = np.asarray(values, float)
    r = len(values)
    mean = float(values.mean()) if r else math.nan
    if r < 2:
        return SeedInterval(mean, math.nan, image_se, math.nan, math.nan, math.nan, math.nan)
    sd = float(values.std(ddof=1))
    se = mean_standard_error(sd, r, image_se)
    df = float(r - 1)
    if se == 0:
        return SeedInterval(mean, sd, image_se, mean, mean, df, 1.0 if mean == 0 else 0.0)
    t = _scipy_stats().t
    half = float(t.ppf(0.5 + CONFIDENCE / 2, df)) * se
    p = float(2 * t.sf(abs(mean) / se, df))
    low, high = (mean - half, mean + half) if bounds is None else (max(mean - half, bounds[0]), min(mean + half, bounds[1]))
    return SeedInterval(mean, sd, image_se, low, high, df, p)


def mean_standard_error(seed_std: float, seeds: int, image_se: float) -> float:
    """The standard error of a mean over `seeds` seeds: seed-to-seed variance / R plus the image
    part's (unmeasured, NaN: none); what `seed_interval` and `equivalence_p` test on."""
    return math.sqrt(seed_std**2 / seeds + (image_se if math.isfinite(image_se) else 0.0) ** 2)


def _strictest_alpha(pairs: int) -> float:
    """The level of Holm's strictest step over `pairs` tested pairs: what a pair must clear first."""
    return (1 - CONFIDENCE) / max(pairs, 1)


def repeats_to_resolve(diff: float, seed_std: float, image_se: float, seeds: int, pairs: int = 1) -> float:
    """The fewest repeats whose run would support this difference, with its sign, 4 times in 5
    (its t-test at 0.05 / pairs: Holm's strictest step), that chance averaged over what the `seeds`
    measured say the truth may be: the seed spread sigma, sigma^2 ~ (seeds - 1) s^2 / chi^2 (a few
    seeds often measure it too small), and the difference, normal around the measured one with
    variance sigma^2 / seeds + image_se^2. Taking the measured difference and spread as the truth
    instead came true for 28% (3 seeds) and 16% (5 seeds) of the predictions a held-out run could
    check, where it promised 80% (`harness bench --section calibration`): the pairs a few seeds
    leave just short of support are mostly those whose spread they measured too small. This form
    reaches its 4 in 5 where true differences are as spread as it assumes (a simulation in the
    tests), but on the calibration task its small predictions came true 0-17% of the time with the
    data fixed (69-85% with a bootstrap per seed): three seeds cannot tell a fluke, so it is printed
    as a guess. inf when no number up to 1,000 reaches 4 in 5; `resolve_limit` says why."""
    if not all(math.isfinite(x) for x in (diff, seed_std)) or diff == 0 or seeds < 2:
        return math.inf
    image_var = (image_se if math.isfinite(image_se) else 0.0) ** 2
    if seed_std == 0 and image_var == 0:
        return 2.0  # every seed measured the same difference, and no image noise: the least run resolves it
    from scipy import special  # the distributions' functions without scipy.stats' per-call overhead: 40 models have 780 pairs

    grid = (np.arange(RESOLVE_QUADRATURE) + 0.5) / RESOLVE_QUADRATURE
    spread_var = (seeds - 1) * seed_std**2 / special.chdtri(seeds - 1, 1 - grid)[:, None]  # chi^2 quantiles; [sigma draws, 1]
    true_diff = abs(diff) + np.sqrt(spread_var / seeds + image_var) * special.ndtri(grid)[None, :]  # positive: as measured
    alpha = _strictest_alpha(pairs)

    def chance(r: int) -> float:
        critical = special.stdtrit(r - 1, 1 - alpha / 2)
        return float(np.mean(special.stdtr(r - 1, true_diff / np.sqrt(spread_var / r + image_var) - critical)))

    if chance(MAX_REPEATS) < POWER:
        return math.inf
    low, high = 2, MAX_REPEATS  # the chance grows with r: the fewest r that reaches POWER, by bisection
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if chance(middle) >= POWER else (middle + 1, high)
    return float(low)


def across_seeds(per_seed: pd.DataFrame, metric: str, draws: dict[str, np.ndarray] | None = None, split: str = "val", resampled: bool = False,
                 compared: Callable[[str, str], bool] | None = None):
    """(per-model table, per-pair table) over repeats, each pair over the repeats both models
    completed, paired by repeat. per_seed: model, repeat, member, value (its `metric`); draws:
    member -> its metric on shared image resamples (`image_draws`), None without a per-image basis
    (seeds only); resampled: seeds trained on bootstraps of the training set (said in `covers`);
    compared: which pairs (a, b), Holm's adjustment over them alone (default: every pair)."""
    table = per_seed.pivot_table(index="repeat", columns="model", values="value", aggfunc="first")
    member = per_seed.pivot_table(index="repeat", columns="model", values="member", aggfunc="first")
    models = list(dict.fromkeys(per_seed["model"]))
    covers = seeds_and_images(split, resampled) if draws else seeds_only(resampled)

    def image_se(of_resample: Callable[[str], np.ndarray], names: list[str]) -> float:
        if not draws or not all(n in draws for n in names):
            return 0.0
        return float(np.std(of_resample(names), ddof=1))

    model_rows = []
    for model in models:
        values = table[model].dropna()
        names = member.loc[values.index, model].tolist()
        interval = seed_interval(values, image_se(lambda ns: np.mean([draws[n] for n in ns], axis=0), names), metrics.bounds(metric))
        model_rows.append({"model": model, "seeds": len(values), "mean": interval.mean, "std": interval.seed_std, "low": interval.low, "high": interval.high})
    pair_rows = []
    for a, b in combinations(models, 2):
        if compared is not None and not compared(a, b):
            continue
        both = table[[a, b]].dropna()
        pairs_of = [(member.loc[r, a], member.loc[r, b]) for r in both.index]
        d = (both[a] - both[b]).to_numpy()
        se = image_se(lambda _: np.mean([draws[x] - draws[y] for x, y in pairs_of], axis=0), [n for p in pairs_of for n in p])
        interval = seed_interval(d, se, metrics.difference_bounds(metric))
        a_ahead = d > 0 if higher_is_better(metric) else d < 0
        pair_rows.append({
            "model_a": a, "model_b": b, "metric": metric, "seeds": len(d), "diff": interval.mean,
            "diff_low": interval.low, "diff_high": interval.high, "covers": covers,
            # In how many of the paired seeds each scored better (Bouthillier et al.'s P(A > B), counted).
            "seeds_a_better": int(a_ahead.sum()), "seeds_b_better": int((~a_ahead & (d != 0)).sum()),
            "seed_std": interval.seed_std, "image_se": se, "df": interval.df, "p_t": interval.p,
        })
    pairs = pd.DataFrame(pair_rows)
    if len(pairs):
        pairs["p_holm"] = holm(pairs["p_t"].to_numpy())
        pairs["supported"] = pairs["p_holm"] < 1 - CONFIDENCE
        pairs["repeats_to_resolve"] = _resolve_guesses(pairs)
        pairs["resolve_limit"] = _resolve_limits(pairs)
    return pd.DataFrame(model_rows), pairs


def _resolve_guesses(pairs: pd.DataFrame) -> list[float]:
    """`repeats_to_resolve` per pair: only for those not supported (a supported one needs no more
    repeats; 40 models have 780 pairs, and each guess is a search over repeat counts), and not for
    a pair with fewer than two paired seeds (one seed measures no spread to guess from); at Holm's
    strictest step over the pairs tested."""
    tested = int(pairs["p_t"].notna().sum())
    return [math.nan if row.supported or row.seeds < 2 else repeats_to_resolve(row.diff, row.seed_std, row.image_se, row.seeds, tested)
            for row in pairs.itertuples(index=False)]


def _resolve_limits(pairs: pd.DataFrame) -> list[str | None]:
    """`resolve_limit` per pair whose `repeats_to_resolve` is inf (else None), at the same Holm step."""
    tested = int(pairs["p_t"].notna().sum())
    return [resolve_limit(row.diff, row.image_se, tested) if math.isinf(row.repeats_to_resolve) else None
            for row in pairs.itertuples(index=False)]


def resolve_limit(diff: float, image_se: float, pairs: int = 1) -> str:
    """What keeps a pair that no number of repeats is likely to resolve from it, for its words:
    "images" when image noise alone hides the difference as measured, whatever the seeds: with
    the seed part gone (infinitely many repeats) its test at Holm's strictest step would support it
    less than 4 times in 5 (if the difference is as measured, more images would help and more
    seeds would not; checked on held-out seeds: docs/comparing.md); "seeds"
    otherwise: the difference is small beside the seed-to-seed spread, or the seeds measured leave
    both too uncertain (two seeds of a loss ranked without a per-image basis, say, where no image
    noise is involved at all); "zero" where the seeds' mean difference is exactly zero (two models
    that score the same in every seed, as two that predict nothing do), which no number of
    repeats resolves and neither images nor seeds explain."""
    if diff == 0:
        return "zero"
    image_se = image_se if math.isfinite(image_se) else 0.0
    if image_se <= 0:
        return "seeds"
    from scipy import special

    chance = special.ndtr(abs(diff) / image_se - special.ndtri(1 - _strictest_alpha(pairs) / 2))
    return "images" if chance < POWER else "seeds"


def equivalence_p(diff: float, seed_std: float, image_se: float, seeds: int, margin: float) -> float:
    """Two one-sided t-tests (TOST) that the true difference lies inside (-margin, +margin), on the
    interval's own variance and degrees of freedom (`seed_interval`): the larger of the two
    one-sided p-values. Small: the difference is, with that confidence, smaller than the margin.
    NaN where the seeds measure no spread (fewer than two)."""
    if seeds < 2 or not all(math.isfinite(x) for x in (diff, seed_std)):
        return math.nan
    se = mean_standard_error(seed_std, seeds, image_se)
    if se == 0:
        return 0.0 if abs(diff) < margin else 1.0
    t = _scipy_stats().t
    return float(max(t.sf((diff + margin) / se, seeds - 1), t.sf((margin - diff) / se, seeds - 1)))


def mark_equivalence(pairs: pd.DataFrame, margin: float | None) -> pd.DataFrame:
    """pairs.csv's `p_equivalent` (`equivalence_p`, Holm-adjusted across the pairs tested, as
    `supported` is) and `equivalent` (under 0.05: the difference is smaller than `margin`,
    `output.equivalence_margin`, with 95% confidence), for pairs over repeats; none without a
    margin. Not supported is not the same: it may be a large difference that few seeds left
    uncertain. A supported pair can be equivalent too: real, and smaller than what matters."""
    if margin is None or pairs.empty or "seed_std" not in pairs:
        return pairs
    raw = [equivalence_p(row.diff, row.seed_std, row.image_se, row.seeds, margin) for row in pairs.itertuples(index=False)]
    pairs = pairs.copy()
    pairs["equivalence_margin"] = margin
    pairs["p_equivalent"] = holm(raw)
    pairs["equivalent"] = pairs["p_equivalent"] < 1 - CONFIDENCE
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
