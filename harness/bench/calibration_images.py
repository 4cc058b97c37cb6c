"""Bench section `calibration_images`: do the intervals cover what they say on images they did not see?

With one training seed harness reports intervals of image noise only ("would these trained
networks score, and rank, the same on other images?") and says which pairs differ beyond it. The
section `calibration` cannot check that: its truth is other seeds on the same images. Here the
truth is other images. The four small models of `calibration` are trained with a few seeds and
scored once on a large held-out test split; it is cut into disjoint subsets of n images (a few
times over, at random), and on each subset the harness's own statistics give the intervals a run
with an n-image test split would print. Each is judged against the same trained networks on every
image outside the subset:

- one seed (`bootstrap_metric`): each model's interval against its score on the rest, each pair's
  against its difference there; `beyond_noise`: pairs said to differ beyond image noise, and
  `beyond_noise_wrong`: of all pairs, those said to differ whose sign the rest reverses;
- repeats (`across_seeds`, R seeds drawn at random, each draw on the next image subset): against
  the mean over the seeds left out on the rest of the images: the whole "training seeds and test
  images" claim.

The rest is a sample too: `ideal_coverage` is what an exactly calibrated interval reaches against
it, P(|Z| < z / sqrt(1 + n / rest)) for one seed, and for repeats the seed part's figure of
`calibration` (the rest's image noise, a 30th of the subset's here, left out).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from harness.bench.calibration import CALIBRATION_MODELS, METRIC, calibration_config, ideal_coverage, per_seed_values, score_on
from harness.config.naming import model_of, repeat_of
from harness.outputs.statistics import CONFIDENCE, Scored, across_seeds, bootstrap_metric, image_draws
from harness.outputs.uncertainty import last_evaluations

SECTION = "calibration_images"


def bench_calibration_images(folder: Path, seeds: int = 8, steps: int = 256, side: int = 32, train_size: int = 512, val_size: int = 256,
                             test_size: int = 4096, sizes: tuple[int, ...] = (64, 128, 256), repeats: tuple[int, ...] = (3,),
                             draws: int = 60, cuts: int = 4, resamples: int = 2000, models: list[dict] | None = None) -> pd.DataFrame:
    """One run of `seeds` x the models, scored once on `test_size` held-out images; a row per
    one-seed subset size in `sizes`, and per R in `repeats` (on subsets of the middle size)."""
    from harness.api import run
    from harness.config.loading import validate_config

    raw = calibration_config(seeds, steps, side, train_size, val_size, models or CALIBRATION_MODELS)
    raw["name"], raw["data"]["test_size"] = SECTION, test_size
    config = validate_config(raw)
    began = time.perf_counter()
    result = run(config, results_dir=folder / "calibration-images-runs")
    train_s = time.perf_counter() - began
    scored = last_evaluations(result.run_dir / "test_scores.csv", config.data.classes)
    rows = [one_seed_row(scored, n, resamples, cuts) for n in sizes if 2 * n <= test_size]
    middle = sorted(sizes)[len(sizes) // 2]
    rows += [repeats_row(scored, r, middle, draws, resamples) for r in repeats if r < seeds]
    table = pd.DataFrame(rows)
    table.insert(0, "section", SECTION)
    table.insert(1, "contender", [f"R = {r}, {n} images" for r, n in zip(table["repeats"], table["images"])])
    table["test_images"] = test_size
    table["train_s"] = round(train_s, 1)
    return table


def one_seed_row(scored: dict[str, Scored], size: int, resamples: int, cuts: int = 4, seed: int = 0) -> dict:
    """Every seed's networks on every `size`-image subset of `cuts` random cuts of the images into
    disjoint subsets, judged on the images outside it. (One cut gives few subsets of a large size,
    and a coverage that moved by 2-3 points from one cut to the next; subsets of different cuts
    overlap.)"""
    count = _image_count(scored)
    subsets = [s for cut in range(cuts) for s in _disjoint_subsets(count, size, seed + cut)]
    models, pairs = [], []
    for repeat in sorted({repeat_of(n) for n in scored}):
        networks = {model_of(n): s for n, s in scored.items() if repeat_of(n) == repeat}
        for subset in subsets:
            rest = np.setdiff1d(np.arange(count), subset)
            per_model, per_pair = bootstrap_metric(_on(networks, subset), METRIC, resamples=resamples)
            truth = {m: score_on(s, rest) for m, s in networks.items()}
            models += [_within(row.low, row.high, truth[row.model]) for row in per_model.itertuples(index=False)]
            pairs += [_judged_pair(row, truth[row.model_a] - truth[row.model_b]) for row in per_pair.itertuples(index=False)]
    z = stats.norm.ppf(0.5 + CONFIDENCE / 2)
    rates = _rates(models, pairs)
    claims = {"beyond_noise": rates.pop("claimed"), "beyond_noise_wrong": rates.pop("wrong"), "wrong_share_of_claims": rates.pop("wrong_share_of_claims")}
    return {
        "repeats": 1, "images": size, "rest_images": count - size, "subsets": len(subsets), **rates,
        "ideal_coverage": round(float(2 * stats.norm.cdf(z / math.sqrt(1 + size / (count - size))) - 1), 3), **claims,
    }


def repeats_row(scored: dict[str, Scored], size: int, images: int, draws: int, resamples: int, seed: int = 0) -> dict:
    """`draws` random sets of `size` seeds, each on the next `images`-image subset, judged against
    the seeds left out on the images outside it."""
    count = _image_count(scored)
    subsets = _disjoint_subsets(count, images, seed)
    all_seeds = sorted({repeat_of(n) for n in scored})
    rng = np.random.default_rng(seed)
    models, pairs = [], []
    for k in range(draws):
        chosen = set(rng.choice(all_seeds, size, replace=False).tolist())
        subset = subsets[k % len(subsets)]
        rest = np.setdiff1d(np.arange(count), subset)
        mine = {n: s for n, s in scored.items() if repeat_of(n) in chosen}
        on_subset = _on(mine, subset)
        per_seed = per_seed_values(on_subset)
        per_model, per_pair = across_seeds(per_seed, f"test_{METRIC}", image_draws(on_subset, METRIC, resamples=resamples), split="test")
        held_out = per_seed_values({n: s for n, s in scored.items() if repeat_of(n) not in chosen}, rest)
        truth = held_out.groupby("model")["value"].mean()
        wide = held_out.pivot_table(index="repeat", columns="model", values="value")
        models += [_within(row.low, row.high, truth[row.model]) for row in per_model.itertuples(index=False)]
        pairs += [_judged_pair(row, float((wide[row.model_a] - wide[row.model_b]).mean()), claim="supported") for row in per_pair.itertuples(index=False)]
    rates = _rates(models, pairs)
    claims = {"supported": rates.pop("claimed"), "false_claims": rates.pop("wrong"), "wrong_share_of_claims": rates.pop("wrong_share_of_claims")}
    return {
        "repeats": size, "images": images, "rest_images": count - images, "subsets": draws, **rates,
        "ideal_coverage": round(ideal_coverage(size, len(all_seeds) - size), 3), **claims,
    }


def _rates(models: list[bool], pairs: list[dict]) -> dict:
    """What both rows report: the intervals judged, their coverage, and the claims (`claimed`,
    `wrong`: shares of all pairs; each row names these two in its own words)."""
    frame = pd.DataFrame(pairs)
    claimed = frame["claimed"]
    return {
        "model_intervals": len(models), "model_coverage": round(float(np.mean(models)), 3),
        "pair_intervals": len(frame), "pair_coverage": round(float(frame["covered"].mean()), 3),
        "claimed": round(float(claimed.mean()), 3), "wrong": round(float(frame["wrong"].mean()), 3),
        "wrong_share_of_claims": round(float(frame.loc[claimed, "wrong"].mean()), 3) if claimed.any() else 0.0,
    }


def _image_count(scored: dict[str, Scored]) -> int:
    return len(next(iter(scored.values())).quantities["loss"])


def _disjoint_subsets(count: int, size: int, seed: int) -> list[np.ndarray]:
    """As many disjoint `size`-image subsets as `count` images hold, in a random order."""
    order = np.random.default_rng(seed).permutation(count)
    return [np.sort(order[i * size:(i + 1) * size]) for i in range(count // size)]


def _on(members: dict[str, Scored], images: np.ndarray) -> dict[str, Scored]:
    return {n: Scored({k: v[images] for k, v in s.quantities.items()}, s.scores) for n, s in members.items()}


def _within(low: float, high: float, target: float) -> bool:
    return bool(low <= target <= high)


def _judged_pair(row, target: float, claim: str = "beyond_image_noise") -> dict:
    claimed = bool(getattr(row, claim))
    return {"covered": _within(row.diff_low, row.diff_high, target), "claimed": claimed,
            "wrong": claimed and bool(np.sign(row.diff) != np.sign(target))}
