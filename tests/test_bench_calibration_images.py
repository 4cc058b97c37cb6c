"""Bench section `calibration_images`: the intervals judged on images they did not see."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pandas as pd
import pytest

from harness.bench import calibration_images
from harness.bench.calibration_images import one_seed_row, repeats_row
from harness.core.scores import segmentation_scores
from harness.outputs.statistics import Scored


def _networks(seeds: int, images: int, quality: dict[str, float], seed_spread: float = 0.0, rng_seed: int = 0) -> dict[str, Scored]:
    """Members `model@r` scored on the same i.i.d. images: each image's IoU scatters around the
    model's quality (plus a per-seed shift), as a trained network's do."""
    rng = np.random.default_rng(rng_seed)
    truth = rng.integers(100, 300, (images, 1)).astype(float)
    scored = {}
    for r in range(1, seeds + 1):
        for model, q in quality.items():
            shift = rng.normal(0, seed_spread)
            share = np.clip(q + shift + rng.normal(0, 0.15, (images, 1)), 0, 1)
            intersection = np.floor(truth * share)
            scored[f"{model}@{r}"] = Scored({"loss": rng.random(images), "intersection": intersection,
                                             "predicted": intersection + rng.integers(0, 30, (images, 1)), "truth": truth}, segmentation_scores)
    return scored


def test_one_seed_intervals_cover_the_same_networks_on_the_other_images_about_as_often_as_they_say():
    scored = _networks(2, 1024, {"a": 0.70, "b": 0.69, "c": 0.60})
    row = one_seed_row(scored, 128, resamples=500)
    # 4 cuts x 1024 / 128 subsets, x 2 seeds x 3 models (or pairs)
    assert (row["subsets"], row["model_intervals"], row["pair_intervals"]) == (32, 192, 192)
    assert row["ideal_coverage"] == pytest.approx(0.933, abs=0.002)  # 2 Phi(1.96 / sqrt(1 + 128 / 896)) - 1
    assert row["model_coverage"] >= 0.85 and row["pair_coverage"] >= 0.85
    assert row["beyond_noise"] > 0.3, "a over c and b over c (0.1 apart) are beyond the noise of 128 images"
    assert row["beyond_noise_wrong"] < 0.025, "a wrong-way claim is one 2.5% tail of an interval: rarer than that"


def test_intervals_narrower_than_the_image_noise_are_caught(monkeypatch):
    true_bootstrap = calibration_images.bootstrap_metric

    def overconfident(members, metric, resamples):
        per_model, per_pair = true_bootstrap(members, metric, resamples=resamples)
        per_model = per_model.assign(low=per_model["value"] - 1e-4, high=per_model["value"] + 1e-4)
        per_pair = per_pair.assign(diff_low=per_pair["diff"] - 1e-4, diff_high=per_pair["diff"] + 1e-4)
        per_pair["beyond_image_noise"] = True
        return per_model, per_pair

    monkeypatch.setattr(calibration_images, "bootstrap_metric", overconfident)
    row = one_seed_row(_networks(2, 1024, {"a": 0.70, "b": 0.695, "c": 0.69}), 128, resamples=200)
    assert row["model_coverage"] < 0.2 and row["pair_coverage"] < 0.2
    assert row["beyond_noise"] == 1.0 and row["beyond_noise_wrong"] > 0.1, "close pairs claimed at every subset: some the wrong way"


def test_a_claim_the_other_images_reverse_is_wrong_and_an_unclaimed_one_is_not():
    Pair = namedtuple("Pair", "diff diff_low diff_high beyond_image_noise supported")
    claimed = calibration_images._judged_pair(Pair(0.03, 0.01, 0.05, True, False), -0.01)
    assert claimed == {"covered": False, "claimed": True, "wrong": True}
    quiet = calibration_images._judged_pair(Pair(0.03, -0.01, 0.07, False, False), -0.005)
    assert quiet == {"covered": True, "claimed": False, "wrong": False}
    assert calibration_images._judged_pair(Pair(0.03, 0.01, 0.05, True, False), 0.02, claim="supported")["claimed"] is False


def test_repeats_are_judged_against_the_seeds_left_out_on_the_other_images():
    scored = _networks(8, 512, {"a": 0.70, "b": 0.66}, seed_spread=0.03)
    row = repeats_row(scored, 3, 128, draws=12, resamples=300)
    assert (row["repeats"], row["images"], row["subsets"], row["pair_intervals"], row["model_intervals"]) == (3, 128, 12, 12, 24)
    assert 0 < row["ideal_coverage"] < 0.95 and row["model_coverage"] >= 0.6 and row["pair_coverage"] >= 0.6
    assert 0 <= row["false_claims"] <= row["supported"] <= 1


def test_the_subsets_are_disjoint_and_each_as_large_as_asked():
    subsets = calibration_images._disjoint_subsets(1000, 128, seed=3)
    assert len(subsets) == 7 and all(len(s) == 128 for s in subsets)
    assert len(np.unique(np.concatenate(subsets))) == 7 * 128


@pytest.mark.slow
def test_calibration_images_section_trains_scores_once_on_test_and_judges_every_subset(tmp_path):
    from harness.bench.bench import TINY_CALIBRATION_IMAGES
    from harness.bench.calibration_images import bench_calibration_images

    table = bench_calibration_images(tmp_path, **TINY_CALIBRATION_IMAGES).set_index("contender")
    assert list(table.index) == ["R = 1, 16 images", "R = 1, 32 images", "R = 3, 32 images"]
    assert (table["test_images"] == 64).all() and table.loc["R = 1, 16 images", "model_intervals"] == 4 * 4 * 2  # 4 subsets, 4 seeds, 2 models
    assert table[["model_coverage", "pair_coverage"]].apply(lambda c: c.between(0, 1)).all().all()
    assert pd.isna(table.loc["R = 1, 16 images", "supported"]) and table.loc["R = 3, 32 images", "subsets"] == 4
