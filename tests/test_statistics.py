"""Rankings with their uncertainty: per-image scores, the paired bootstrap, paired tests across
seeds with Holm's correction, the common loss, and how the report and the nightly use them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from conftest import tiny_config

from harness.api import run
from harness.config.loading import validate_config
from harness.config.nightly_spec import ThresholdSpec
from harness.core.scores import segmentation_scores
from harness.nights.regressions import compare
from harness.outputs.statistics import IMAGES_ONLY, SEEDS_AND_IMAGES, Scored, across_seeds, bootstrap_metric, holm, image_draws, indistinguishable, seed_interval
from harness.outputs.writers import counts_of
from harness.rundir import read_csv


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """fcn and unet train on bce+dice, deconv on focal+dice: the common loss is bce+dice."""
    return run(validate_config(tiny_config(train={"epochs": 3}, output={"plot_formats": ["png"]})), results_dir=tmp_path_factory.mktemp("r"))


@pytest.mark.slow
def test_val_scores_hold_every_image_of_every_evaluation_and_add_up_to_the_val_rows(tiny_run):
    scores = read_csv(tiny_run.run_dir / "val_scores.csv")
    evaluations = sorted(tiny_run.losses.query("split == 'val'")["step"].unique())
    assert len(scores) == len(evaluations) * 3 * 8  # evaluations x members x validation images
    for (step, model), rows in scores.groupby(["step", "model"]):
        counts = counts_of(rows.sort_values("image"), classes=1)
        whole = segmentation_scores({k: v.sum(axis=0) for k, v in counts.items()}, len(rows))
        val = tiny_run.losses.query("split == 'val' and step == @step and model == @model").set_index("metric")["value"]
        for metric in ("loss", "iou", "f1"):
            assert math.isclose(float(whole[metric]), val[metric], rel_tol=1e-5, abs_tol=1e-7), (step, model, metric)
        per_image = segmentation_scores(counts, 1)
        np.testing.assert_allclose(per_image["iou"], rows.sort_values("image")["iou"], rtol=1e-6)


def members_with(iou_by_member: dict[str, float], images: int = 60, noise: float = 0.15, seed: int = 0) -> dict[str, Scored]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(100, 300, (images, 1)).astype(float)
    shared = rng.normal(0, noise, (images, 1))  # hard images are hard for every member: paired
    out = {}
    for name, quality in iou_by_member.items():
        intersection = np.floor(truth * np.clip(quality + shared + rng.normal(0, 0.02, (images, 1)), 0.01, 1))
        out[name] = Scored({"loss": rng.random(images), "intersection": intersection, "predicted": intersection + 5, "truth": truth}, segmentation_scores)
    return out


def test_one_scored_image_gives_no_interval_and_a_warning_not_a_crash():
    """`data.test_size: 1` with one seed stopped the run in scipy ("two or more observations")."""
    from harness.config.consistency import few_scored_images

    per_member, pairs = bootstrap_metric(members_with({"good": 0.8, "bad": 0.5}, images=1), "iou", resamples=200)
    assert per_member["value"].notna().all() and per_member[["low", "high"]].isna().all().all()
    assert pairs[["diff_low", "diff_high", "p_a_better"]].isna().all().all() and not pairs["beyond_image_noise"].any()
    assert "the ranking is on 1 test image(s)" in few_scored_images(validate_config(tiny_config(data={"test_size": 1})))
    assert "on 8 validation image(s)" in few_scored_images(validate_config(tiny_config()))
    assert few_scored_images(validate_config(tiny_config(data={"val_size": 10}))) is None


def test_two_seeds_are_warned_of_with_the_width_their_interval_has():
    from harness.config.consistency import comparison_warnings, two_seeds
    from harness.outputs.statistics import seed_interval

    two, three = seed_interval([0.50, 0.50 + 0.01 * math.sqrt(2)]), seed_interval([0.49, 0.50, 0.51])  # both: std 0.01
    assert two.seed_std == pytest.approx(three.seed_std)
    assert (two.high - two.low) / (three.high - three.low) == pytest.approx(3.6, abs=0.02)  # the figure the warning says
    assert "3.6 times as wide" in two_seeds(validate_config(tiny_config(data={"val_size": 16}, train={"repeats": 2})))
    assert comparison_warnings(validate_config(tiny_config(data={"val_size": 16}, train={"repeats": 3}))) == []
    assert len(comparison_warnings(validate_config(tiny_config(train={"repeats": 2})))) == 2  # and 8 validation images


def test_paired_bootstrap_separates_a_real_difference_from_none_but_calls_nothing_supported():
    scored = members_with({"good": 0.8, "bad": 0.5, "twin": 0.8})
    scored["clone"] = scored["good"]  # the very same predictions
    per_member, pairs = bootstrap_metric(scored, "iou", resamples=500)
    assert (per_member["low"] <= per_member["value"]).all() and (per_member["value"] <= per_member["high"]).all()
    pair = pairs.set_index(["model_a", "model_b"])
    assert pair.loc[("good", "bad"), "beyond_image_noise"] and pair.loc[("good", "bad"), "p_a_better"] == 1.0
    assert not pair.loc[("good", "clone"), "beyond_image_noise"] and pair.loc[("good", "clone"), "p_a_better"] == 0.5
    assert pair.loc[("good", "clone"), "diff_low"] == pair.loc[("good", "clone"), "diff_high"] == 0.0
    # One training seed: image noise only, so no difference between models is supported.
    assert not pairs["supported"].any() and (pairs["covers"] == IMAGES_ONLY).all()


def test_the_bootstrap_is_paired_a_small_consistent_gain_is_beyond_image_noise_though_intervals_overlap():
    scored = members_with({"a": 0.62, "b": 0.60}, noise=0.2)
    per_member, pairs = bootstrap_metric(scored, "iou", resamples=1000)
    a, b = per_member.set_index("model").loc["a"], per_member.set_index("model").loc["b"]
    assert a["low"] < b["high"], "the members' own intervals overlap"
    assert bool(pairs.loc[0, "beyond_image_noise"]) and pairs.loc[0, "diff_low"] > 0, "the paired difference does not"


def seeded_members(quality: dict[str, float], seeds: int, seed_sd: float, images: int = 60) -> tuple[pd.DataFrame, dict[str, Scored]]:
    """Per-seed members `model@r`: each seed moves each model by its own N(0, seed_sd)."""
    rng = np.random.default_rng(7)
    scored = {}
    for r in range(1, seeds + 1):
        shifted = {f"{m}@{r}": q + rng.normal(0, seed_sd) for m, q in quality.items()}
        scored.update(members_with(shifted, images=images, seed=r))
    per_seed = pd.DataFrame([{"model": n.split("@")[0], "repeat": int(n.split("@")[1]), "member": n,
                              "value": s.scores({k: v.sum(0) for k, v in s.quantities.items()}, images)["iou"]} for n, s in scored.items()])
    return per_seed, scored


def test_across_seeds_the_interval_covers_seed_variation_and_image_noise():
    per_seed, scored = seeded_members({"a": 0.75, "b": 0.60, "c": 0.60}, seeds=5, seed_sd=0.01)
    draws = image_draws(scored, "iou", resamples=400)
    per_model, pairs = across_seeds(per_seed, "val_iou", draws)
    pair = pairs.set_index(["model_a", "model_b"])
    assert pair.loc[("a", "b"), "supported"] and pair.loc[("a", "b"), "diff_low"] > 0
    assert not pair.loc[("b", "c"), "supported"]
    assert (pairs["covers"] == SEEDS_AND_IMAGES).all() and (pairs["p_holm"] >= pairs["p_t"]).all()
    assert (pairs["seeds"] == 5).all() and (pairs["image_se"] > 0).all()
    assert (pair.loc[("a", "b"), "seeds_a_better"], pair.loc[("a", "b"), "seeds_b_better"]) == (5, 0)
    assert (pairs["seeds_a_better"] + pairs["seeds_b_better"] == 5).all()
    # Wider than the seeds alone would make it: the image part adds to the variance.
    seeds_alone = seed_interval(per_seed.query("model == 'b'")["value"].to_numpy() - per_seed.query("model == 'c'")["value"].to_numpy())
    assert pair.loc[("b", "c"), "diff_high"] - pair.loc[("b", "c"), "diff_low"] > seeds_alone.high - seeds_alone.low
    assert (per_model["low"] < per_model["mean"]).all() and (per_model["std"] > 0).all()
    assert indistinguishable(["a", "b", "c"], pairs) == ["", "c", "b"]


@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_seed_intervals_never_cover_less_than_they_say_whatever_the_mix_of_seed_and_image_noise(seeds):
    """R seeds' mean, its seed spread estimated from them, its image part known (the bootstrap's
    standard error). One Student-t of R - 1 degrees of freedom over the whole variance covers at
    least 95% for every mix, and more once the image part is as large as the seed part (the wider
    image part is kept on purpose: docs/comparing.md, "Why one t quantile for both parts"). The
    alternative measured there, each part its own quantile, is computed beside it: narrower, and
    still about 95% here, where seed effects are normal."""
    rng = np.random.default_rng(seeds)
    draws, seed_sd = 3000, 1.0
    critical = stats.t.ppf(0.975, seeds - 1)
    for ratio in (0.0, 1.0, 3.0):  # the image part's standard error over the seed part's, sd / sqrt(R)
        image_se = ratio * seed_sd / math.sqrt(seeds)
        noise = rng.normal(0, seed_sd, (draws, seeds)) + rng.normal(0, image_se, (draws, 1))  # the images are shared by the seeds
        intervals = [seed_interval(values, image_se) for values in noise]
        covered = np.mean([i.low <= 0 <= i.high for i in intervals])
        assert covered >= 0.94, (ratio, covered)
        assert all((i.p < 0.05) == (i.low > 0 or i.high < 0) for i in intervals)  # its test and its interval agree
        seed_part = noise.std(axis=1, ddof=1) / math.sqrt(seeds)
        own_quantiles = np.hypot(critical * seed_part, 1.959964 * image_se)
        assert np.mean(np.abs(noise.mean(axis=1)) <= own_quantiles) >= 0.94
        if ratio >= 1.0:
            assert covered > 0.985 and all(i.high - i.mean >= w for i, w in zip(intervals, own_quantiles))


def test_a_pair_with_one_seed_in_both_gets_no_guess_and_no_share_of_holm():
    per_seed, scored = seeded_members({"a": 0.75, "b": 0.60, "c": 0.70}, seeds=4, seed_sd=0.02)
    thin = per_seed[(per_seed["model"] != "c") | (per_seed["repeat"] == 1)]  # c: three of its seeds diverged
    _, pairs = across_seeds(thin, "val_iou", image_draws(scored, "iou", resamples=200))
    pair = pairs.set_index(["model_a", "model_b"])
    assert pair.loc[("a", "c"), "seeds"] == 1 and pd.isna(pair.loc[("a", "c"), "p_t"])
    assert pd.isna(pair.loc[("a", "c"), "repeats_to_resolve"])  # was inf: "no number of repeats is likely to resolve it"
    assert pair.loc[("a", "b"), "p_holm"] == pair.loc[("a", "b"), "p_t"]  # the only pair tested


def test_a_large_seed_spread_is_not_supported_where_one_seed_would_look_sure():
    per_seed, scored = seeded_members({"a": 0.70, "b": 0.69}, seeds=3, seed_sd=0.08)
    _, pairs = across_seeds(per_seed, "val_iou", image_draws(scored, "iou", resamples=400))
    assert not pairs.loc[0, "supported"] and pairs.loc[0, "repeats_to_resolve"] > 3


def test_an_interval_of_iou_stays_within_0_and_1_and_a_loss_interval_is_not_cut():
    # Three spread-out seeds near 0: the t-interval would reach below 0, which no IoU can.
    spread = [0.02, 0.45, 0.04]
    free = seed_interval(spread)
    assert free.low < 0
    cut = seed_interval(spread, bounds=(0.0, 1.0))
    assert cut.low == 0.0 and cut.high == free.high and cut.p == free.p and cut.mean == free.mean
    per_seed = pd.DataFrame([{"model": m, "repeat": r, "member": f"{m}@{r}", "value": v}
                             for m, values in {"a": spread, "b": [0.98, 0.52, 0.97]}.items() for r, v in enumerate(values, 1)])
    per_model, pairs = across_seeds(per_seed, "test_iou")
    assert per_model["low"].min() == 0.0 and per_model["high"].max() == 1.0
    assert pairs.loc[0, "diff_low"] == max(-1.0, seed_interval(np.subtract(spread, [0.98, 0.52, 0.97])).low)
    losses, _ = across_seeds(per_seed.assign(value=per_seed["value"] - 0.5), "val_loss")
    assert losses["low"].min() < -0.5  # a kind's own loss may be negative: not cut


def test_holm_adjustment_matches_the_textbook_example():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    assert np.isnan(holm([0.01, np.nan])[1]) and holm([0.01, np.nan])[0] == 0.01


@pytest.mark.slow
def test_one_seed_summary_and_pairs_carry_intervals_and_the_common_loss(tiny_run):
    summary, pairs = tiny_run.summary, read_csv(tiny_run.run_dir / "pairs.csv")
    for metric in ("val_iou", "val_f1", "val_loss"):
        assert ((summary[f"{metric}_low"] <= summary[metric] + 1e-9) & (summary[metric] <= summary[f"{metric}_high"] + 1e-9)).all()
    assert "indistinguishable_from" not in summary, "one seed: nothing measured against training randomness"
    assert set(pairs["compared_on"]) == {"bce+dice"} and {"diff", "diff_low", "diff_high", "p_a_better", "supported", "covers", "beyond_image_noise"} <= set(pairs.columns)
    assert not pairs["supported"].any() and (summary["interval_covers"] == IMAGES_ONLY).all()
    compared = tiny_run.losses.query("metric == 'compare_loss'")
    assert set(compared.query("split == 'train'")["model"]) == {"deconv"}, "only the member training on another loss needs it computed"
    assert set(compared.query("split == 'val'")["model"]) == {"fcn", "unet", "deconv"}, "validation scores every member on it"
    assert any("train on different losses" in w for w in tiny_run.info["warnings"])
    report = (tiny_run.run_dir / "report.html").read_text()
    assert "One training seed" in report and "train.repeats" in report and (tiny_run.run_dir / "plots" / "pair_differences.png").exists()


@pytest.mark.slow
def test_the_common_loss_is_computed_from_each_members_predictions(tmp_path):
    result = run(validate_config(tiny_config(train={"epochs": 1}, output={"probe_steps": 0, "progress": "none", "compare_loss": "bce"})), results_dir=tmp_path)
    train = result.losses.query("split == 'train'").pivot_table(index=["model", "step"], columns="metric", values="value")
    assert set(train.reset_index()["model"]) == {"fcn", "unet", "deconv"} and train["compare_loss"].notna().all()
    plain = train.loc[["fcn", "unet"]]
    assert (plain["compare_loss"] < plain["loss"]).all(), "bce alone is below bce + dice (dice >= 0)"
    assert not any("train on different losses" in w for w in result.info["warnings"])


@pytest.mark.slow
def test_repeats_rank_by_a_paired_test_not_overlapping_intervals(tmp_path):
    result = run(validate_config(tiny_config(train={"epochs": 1, "repeats": 3})), results_dir=tmp_path)
    pairs = read_csv(result.run_dir / "pairs.csv")
    assert {"seeds", "p_t", "p_holm", "supported", "diff_low", "diff_high", "seed_std", "image_se", "repeats_to_resolve"} <= set(pairs.columns)
    assert (pairs["seeds"] == 3).all() and (pairs["covers"] == SEEDS_AND_IMAGES).all()
    summary = result.summary
    assert {"val_iou_low", "val_iou_high", "val_iou_std", "indistinguishable_from"} <= set(summary.columns)
    assert (summary["interval_covers"] == SEEDS_AND_IMAGES).all()
    assert "Over 3 training seeds" in (result.run_dir / "report.html").read_text()


def test_nightly_verdict_can_ignore_drops_within_the_bootstrap_noise():
    now = {("m", "val_iou"): 0.80, ("m", "val_iou_low"): 0.76, ("m", "val_iou_high"): 0.84}
    before = {("m", "val_iou"): 0.83}
    status = {"m": "ok"}
    plain = compare(now, before, status, status, {"val_iou": ThresholdSpec(abs=0.02)}, "previous", "r0")
    noisy = compare(now, before, status, status, {"val_iou": ThresholdSpec(abs=0.02, beyond_noise=True)}, "previous", "r0")
    assert plain[0].regressed and not noisy[0].regressed and "noise" in noisy[0].note
    # Without beyond_noise the threshold alone decides, and the reader is told the drop may be noise.
    assert plain[0].note == ("within tonight's 95% interval [0.76, 0.84] of validation-image noise only (one training seed: training "
                             "randomness not measured): it may be noise (beyond_noise: true judges that)")
    assert compare(now, {("m", "val_iou"): 0.86}, status, status, {"val_iou": ThresholdSpec(abs=0.02)}, "previous", "r0")[0].note == ""
    assert compare({("m", "val_iou"): 0.80}, before, status, status, {"val_iou": ThresholdSpec(abs=0.02)}, "previous", "r0")[0].note == ""  # no interval
    outside = compare(now, {("m", "val_iou"): 0.86}, status, status, {"val_iou": ThresholdSpec(abs=0.02, beyond_noise=True)}, "previous", "r0")
    assert outside[0].regressed and "validation-image noise only (one training seed" in outside[0].note


def test_the_nightly_verdict_names_the_split_and_the_sources_its_interval_covers():
    status = {"m": "ok"}
    now = {("m", "test_iou"): 0.80, ("m", "test_iou_low"): 0.76, ("m", "test_iou_high"): 0.84, ("m", "repeats"): 3}
    watched = {"test_iou": ThresholdSpec(abs=0.02, beyond_noise=True)}
    [seeds] = compare(now, {("m", "test_iou"): 0.83}, status, status, watched, "previous", "r0")
    assert seeds.note.endswith("of training randomness and test-image noise (repeats): noise")
    [resampled] = compare(now, {("m", "test_iou"): 0.83}, status, status, watched, "previous", "r0", resampled=True)
    assert "training randomness (training-set bootstraps included) and test-image noise" in resampled.note
    [one_seed] = compare({**now, ("m", "repeats"): 1}, {("m", "test_iou"): 0.83}, status, status, watched, "previous", "r0")
    assert "test-image noise only (one training seed" in one_seed.note


def test_the_seeds_each_model_won_are_counted_by_the_metrics_direction_and_named_in_the_verdict():
    from harness.outputs.verdict_text import verdict

    # Loss: lower is better. a is lower than b in seeds 1, 2, 4 and higher in 3; c equals b in seed 2.
    per_seed = pd.DataFrame({"model": ["a", "b", "c"] * 4, "repeat": [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4],
                             "value": [0.30, 0.40, 0.50, 0.31, 0.40, 0.40, 0.45, 0.41, 0.20, 0.29, 0.42, 0.30]})
    per_seed["member"] = per_seed["model"] + "@" + per_seed["repeat"].astype(str)
    _, pairs = across_seeds(per_seed, "val_loss")
    counts = pairs.set_index(["model_a", "model_b"])[["seeds_a_better", "seeds_b_better"]]
    assert counts.loc[("a", "b")].tolist() == [3, 1] and counts.loc[("b", "c")].tolist() == [1, 2]  # a tie is neither's
    text = verdict(pairs, "val_loss")
    assert "a over b (" in text and "better in 3 of 4 seeds" in text


def test_an_unsupported_difference_whose_interval_excludes_zero_says_holm_is_why():
    from harness.outputs.verdict_text import verdict

    pairs = pd.DataFrame({"model_a": ["a", "a"], "model_b": ["b", "c"], "metric": "val_iou", "diff": [0.18, 0.05],
                          "diff_low": [0.05, -0.02], "diff_high": [0.31, 0.12], "covers": "training seeds and validation images",
                          "seeds": 3, "p_t": [0.03, 0.2], "p_holm": [0.06, 0.2], "supported": [False, False]})
    text = verdict(pairs, "val_iou")
    assert "a over b (+0.1800 [+0.0500, +0.3100]), its interval excludes 0 only before Holm's adjustment across the pairs (p_holm 0.060)" in text
    assert "a over c (+0.0500 [-0.0200, +0.1200]);" in text or text.rstrip(".").endswith("a over c (+0.0500 [-0.0200, +0.1200])")


def test_a_difference_of_tiny_values_is_written_with_its_significant_digits():
    """Autoencoders' mean squared errors differ by 1e-5: four decimals would say -0.0000."""
    from harness.outputs.verdict_text import verdict

    pairs = pd.DataFrame({"model_a": ["small"], "model_b": ["big"], "metric": "test_loss", "diff": [-2.1e-5], "diff_low": [-1.2e-4],
                          "diff_high": [8.0e-5], "covers": "training seeds and test images", "seeds": 2, "p_t": [0.5], "p_holm": [0.5],
                          "supported": [False]})
    text = verdict(pairs, "test_loss")
    assert "small over big (-2.1e-05 [-1.2e-04, +8.0e-05])" in text and "0.0000" not in text


def test_a_tie_is_said_as_one_with_no_better_model_and_no_negative_zero():
    from harness.outputs.verdict_text import verdict

    pairs = pd.DataFrame({"model_a": ["unet"], "model_b": ["deconv"], "metric": "test_iou", "diff": [0.0], "diff_low": [-0.0],
                          "diff_high": [0.0], "covers": "training seeds and test images", "seeds": 3, "seeds_a_better": [0],
                          "seeds_b_better": [0], "p_t": [1.0], "p_holm": [1.0], "supported": [False]})
    text = verdict(pairs, "test_iou")
    assert "unet against deconv (+0.0000 [+0.0000, +0.0000]), equal in 3 of 3 seeds" in text
    assert " over " not in text and "-0.0000" not in text


def test_repeats_to_resolve_allows_for_how_uncertain_the_difference_still_is():
    from harness.outputs.statistics import repeats_to_resolve

    # A difference of 2 seed spreads, measured on 5 seeds: resolvable, and with more seeds behind it
    # (a surer difference) by fewer repeats than when only 3 seeds measured it.
    assert repeats_to_resolve(0.08, 0.04, 0.002, seeds=5, pairs=6) < repeats_to_resolve(0.08, 0.04, 0.002, seeds=3, pairs=6) < 30
    # A quarter of a spread on 3 seeds: the true difference may as well be zero or reversed; no
    # number of repeats promises 4 in 5. (Taking 0.01 as the truth predicted 0.01 resolvable.)
    assert repeats_to_resolve(0.01, 0.04, 0.002, seeds=3, pairs=6) == float("inf")
    # Image noise larger than the difference: no number of seeds helps.
    assert repeats_to_resolve(0.05, 0.001, 0.05, seeds=10) == float("inf")
    assert repeats_to_resolve(0.05, 0.0, 0.0, seeds=3) == 2.0


def test_repeats_to_resolve_comes_true_about_as_often_as_it_says_on_simulated_seeds():
    # Pairs whose true difference is drawn from a wide spread: 3 seeds measure it; where the
    # prediction is r, a fresh run of r seeds is asked whether it supports the difference.
    from harness.outputs.statistics import repeats_to_resolve, seed_interval

    rng = np.random.default_rng(1)
    resolved = []
    while len(resolved) < 150:
        truth, spread = rng.normal(0, 0.05), 0.04
        seen = truth + rng.normal(0, spread, 3)
        first = seed_interval(seen)
        if first.p < 0.05:
            continue
        r = repeats_to_resolve(first.mean, first.seed_std, 0.0, seeds=3)
        if not np.isfinite(r) or r > 200:
            continue
        again = seed_interval(truth + rng.normal(0, spread, int(r)))
        resolved.append(again.p < 0.05 and np.sign(again.mean) == np.sign(first.mean))
    assert 0.6 <= np.mean(resolved) <= 0.95, np.mean(resolved)


def test_a_pair_no_repeats_resolve_is_said_to_be_hidden_by_image_noise_only_when_it_is():
    # Why no number of repeats is likely to resolve a pair: image noise, when even with the seed
    # part gone (infinitely many seeds, the truth as measured) its test would support it less than
    # 4 times in 5; otherwise what the seeds measured. Simulated runs of 1,000 seeds, the truth as
    # measured, each scored with its own draw of image noise, show which it is.
    from harness.outputs.statistics import across_seeds, repeats_to_resolve, resolve_limit, seed_interval

    def supported_by_many_seeds(diff, seed_std, image_se, pairs):
        rng = np.random.default_rng(0)
        runs = [seed_interval(diff + rng.normal(0, image_se) + rng.normal(0, seed_std, 1000), image_se) for _ in range(400)]
        return np.mean([run.p < 0.05 / pairs and run.mean > 0 for run in runs])

    hidden = (0.022, 0.017, 0.0068, 3, 6)  # real_images with 3 seeds: a test-IoU pair of 44 test images
    loose = (0.05, 0.05, 0.005, 2, 1)  # two seeds: a difference 10 image errors wide, the spread measured by 1 degree of freedom
    for diff, seed_std, image_se, seeds, pairs in (hidden, loose):
        assert repeats_to_resolve(diff, seed_std, image_se, seeds, pairs) == float("inf")
    assert resolve_limit(0.022, 0.0068, 6) == "images" and supported_by_many_seeds(0.022, 0.017, 0.0068, 6) < 0.8
    assert resolve_limit(0.05, 0.005, 1) == "seeds" and supported_by_many_seeds(0.05, 0.05, 0.005, 1) > 0.95
    # A mean difference of exactly zero (two models that score the same in every seed, as two
    # that predict nothing do) is neither.
    assert resolve_limit(0.0, 0.0, 1) == resolve_limit(0.0, 0.01, 1) == "zero"
    # A loss ranked without a per-image basis has no image noise at all: never "images".
    assert repeats_to_resolve(0.1, 0.1, 0.0, 2, 1) == float("inf") and resolve_limit(0.1, 0.0, 1) == resolve_limit(0.1, float("nan"), 3) == "seeds"
    # And the pairs table says which, beside the inf it explains.
    per_seed = pd.DataFrame([{"model": m, "repeat": r, "member": f"{m}@{r}", "value": v} for m, values in
                             {"a": [0.40, 0.20], "b": [0.30, 0.41]}.items() for r, v in enumerate(values, 1)])
    pairs = across_seeds(per_seed, "val_loss")[1]
    assert pairs.loc[0, "repeats_to_resolve"] == float("inf") and pairs.loc[0, "resolve_limit"] == "seeds", pairs.T


def test_the_verdict_says_why_no_repeats_are_likely_to_resolve_a_pair():
    from harness.outputs.verdict_text import verdict

    base = {"model_a": ["a", "a", "b"], "model_b": ["b", "c", "c"], "metric": "best_val_loss", "diff": [-0.18, -0.05, -0.04],
            "diff_low": [-1.7, -0.6, -0.5], "diff_high": [1.3, 0.5, 0.4], "covers": "training seeds (no per-image basis for this metric)",
            "seeds": 2, "image_se": float("nan"), "p_t": [0.6, 0.7, 0.8], "p_holm": [1.0] * 3, "supported": [False] * 3,
            "repeats_to_resolve": [float("inf")] * 3}
    text = verdict(pd.DataFrame({**base, "resolve_limit": ["seeds"] * 3}), "best_val_loss")
    assert ("a over b (-0.1800 [-1.7000, +1.3000]), too uncertain from 2 seeds to guess how many repeats would resolve it "
            "(more seeds would tell, unless the true difference is zero or small beside the seed-to-seed spread);") in text, text
    assert "images" not in text.split("Not supported")[1] and text.count("small beside") == 1, text
    # With an image part that does not hide the difference, the words say so.
    images = {**base, "metric": "val_iou", "diff": [0.05, 0.04, 0.03], "covers": "training seeds and validation images", "image_se": 0.005}
    text = verdict(pd.DataFrame({**images, "resolve_limit": ["seeds", "images", "seeds"]}), "val_iou")
    assert "(image noise alone would not hide it: more seeds would tell, unless the true difference is zero or small beside the seed-to-seed spread)" in text, text
    assert "a over c (+0.0400 [-0.6000, +0.5000]), no number of repeats is likely to resolve it (the true difference may be zero, or too small for these validation images)" in text
    text = verdict(pd.DataFrame({**images, "diff": [0.0, 0.04, 0.03], "resolve_limit": ["zero", "images", "seeds"]}), "val_iou")
    assert "a against b (+0.0000 [-1.7000, +1.3000]), no number of repeats is likely to resolve it (the mean difference over the seeds is zero)" in text, text
    # A run written before the column says what that version said.
    text = verdict(pd.DataFrame(images), "val_iou")
    assert text.count("too small for these validation images") == 1 and "small beside" not in text, text


def test_the_verdict_gives_repeats_to_resolve_as_a_guess_and_says_when_none_is_likely():
    from harness.outputs.verdict_text import verdict

    pairs = pd.DataFrame({"model_a": ["a", "a", "b", "b"], "model_b": ["b", "c", "c", "d"], "metric": "val_iou", "diff": [0.08, 0.01, 0.06, 0.005],
                          "diff_low": [-0.02, -0.05, -0.03, -0.06], "diff_high": [0.18, 0.07, 0.15, 0.07], "covers": "training seeds and validation images",
                          "seeds": 3, "p_t": [0.08, 0.6, 0.1, 0.7], "p_holm": [0.16, 0.6, 0.2, 0.7], "supported": [False] * 4,
                          "repeats_to_resolve": [15.0, float("inf"), 21.0, float("inf")]})
    text = verdict(pairs, "val_iou")
    assert "perhaps 15 repeats would resolve it (a guess from 3 seeds, often optimistic)" in text
    assert "no number of repeats is likely to resolve it (the true difference may be zero, or too small for these validation images)" in text
    # Each explanation once, after the first pair it applies to (the largest differences come first).
    assert text.count("often optimistic") == 1 and text.count("the true difference may be zero") == 1, text
    assert "b over c (+0.0600 [-0.0300, +0.1500]), perhaps 21 repeats would resolve it;" in text, text


def test_a_nightly_drop_paired_on_the_same_images_is_judged_by_the_interval_of_the_change():
    from harness.nights.regressions import Paired

    status = {"m": "ok"}
    now = {("m", "val_iou"): 0.80, ("m", "val_iou_low"): 0.79, ("m", "val_iou_high"): 0.81}  # tonight's own interval excludes 0.83
    watched = {"val_iou": ThresholdSpec(abs=0.02, beyond_noise=True)}
    crossing = {("m", "val_iou"): Paired(-0.03, -0.07, +0.01, "validation images only")}
    [noise] = compare(now, {("m", "val_iou"): 0.83}, status, status, watched, "previous", "r0", paired=crossing)
    assert not noise.regressed and noise.note == ("paired with r0 on the same images: tonight - then -0.03 [-0.07, +0.01] "
                                                  "of validation images only: noise")
    below = {("m", "val_iou"): Paired(-0.03, -0.05, -0.01, "validation images only")}
    [drop] = compare(now, {("m", "val_iou"): 0.83}, status, status, watched, "previous", "r0", paired=below)
    assert drop.regressed and drop.note.endswith("of validation images only")
    # A loss: worse is up. The interval above 0 is a regression; within the threshold nothing is.
    loss = {"val_loss": ThresholdSpec(abs=0.01, beyond_noise=True)}
    [up] = compare({("m", "val_loss"): 0.50}, {("m", "val_loss"): 0.45}, status, status, loss, "previous", "r0",
                   paired={("m", "val_loss"): Paired(0.05, 0.02, 0.08, "x")})
    assert up.regressed
    [small] = compare({("m", "val_loss"): 0.455}, {("m", "val_loss"): 0.45}, status, status, loss, "previous", "r0",
                      paired={("m", "val_loss"): Paired(0.005, 0.002, 0.008, "x")})
    assert not small.regressed and small.note == ""


def test_a_seed_far_from_its_models_others_is_named_about_5_percent_of_the_time_when_seeds_vary_normally():
    """Named against the others' spread (t, R - 2 degrees of freedom), Holm-adjusted across the
    model's seeds: a model whose seeds vary normally has one named about 5% of the time (20,000
    models each: 5.0% at 5 seeds, 4.9% at 8, 5.2% at 16), and a seed 8 standard deviations off
    is named 77% of the time at 5 seeds, 98.5% at 8."""
    from harness.outputs.unusual_seeds import unusual_seeds

    rng = np.random.default_rng(1)
    names = [f"unet@{r}" for r in range(1, 9)]
    normal = np.mean([bool(unusual_seeds(names[:5], rng.normal(0.6, 0.03, 5))) for _ in range(3000)])
    assert 0.035 <= normal <= 0.065, normal
    shifted = rng.normal(0.6, 0.03, (400, 8))
    shifted[:, 1] -= 8 * 0.03
    assert np.mean([[s.member for s in unusual_seeds(names, x)] == ["unet@2"] for x in shifted]) >= 0.93
    (far,) = unusual_seeds(names, [0.586, 0.441, 0.601, 0.612, 0.620, 0.630, 0.644, 0.656])  # 8 seeds of a real network
    assert far.describe().startswith("unet@2 0.4410 (its others 0.5860-0.6560, p_holm 0.00")
    (small,) = unusual_seeds(names[:5], [0.011962, 0.011998, 0.012041, 0.012010, 0.01041])  # a loss whose seeds differ by 1e-4
    assert small.describe() == "unet@5 0.010410 (its others 0.011962-0.012041, p_holm < 0.001)"  # not 0.0120-0.0120, p_holm 0.000
    assert unusual_seeds(names[:4], [0.6, 0.6, 0.6, 0.1]) == []  # 4 seeds: one seed's others have 2 degrees of freedom
    assert [s.member for s in unusual_seeds(names[:5], [0.0, 0.0, 0.05, 0.0, 0.0])] == ["unet@3"]  # others stuck at one score
    assert unusual_seeds(names[:5], [0.0] * 5) == [] and unusual_seeds(names[:5], [0.6, np.nan, 0.6, 0.61, 0.1]) == []


def _seed_table(means: dict[str, float], seeds: int, spread: float, shared: float = 0.01, seed: int = 1) -> pd.DataFrame:
    """Per-seed scores of models whose seeds share a repeat's draw (`shared`) plus their own (`spread`)."""
    rng = np.random.default_rng(seed)
    rows = []
    for repeat in range(1, seeds + 1):
        common = rng.normal(0, shared)
        rows += [{"model": m, "repeat": repeat, "member": f"{m}@{repeat}", "value": mu + common + rng.normal(0, spread)} for m, mu in means.items()]
    return pd.DataFrame(rows)


def test_equivalence_is_two_one_sided_tests_holm_adjusted_and_absent_without_a_margin():
    from harness.outputs.statistics import equivalence_p, mark_equivalence

    _, pairs = across_seeds(_seed_table({"a": 0.80, "b": 0.801, "c": 0.70}, seeds=5, spread=0.002), "val_iou")
    assert "equivalent" not in mark_equivalence(pairs, None)
    marked = mark_equivalence(pairs, 0.01).set_index(["model_a", "model_b"])
    assert marked.loc[("a", "b"), "equivalent"] and not marked.loc[("a", "c"), "equivalent"] and not marked.loc[("b", "c"), "equivalent"]
    assert (marked["equivalence_margin"] == 0.01).all()
    row = marked.loc[("a", "b")]
    raw = [equivalence_p(r.diff, r.seed_std, r.image_se, r.seeds, 0.01) for r in pairs.itertuples(index=False)]
    assert row["p_equivalent"] == pytest.approx(holm(raw)[0]) and holm(raw)[0] == pytest.approx(min(1.0, 3 * raw[0]))
    # By hand: the larger one-sided p of the difference against -margin and +margin, on the interval's t.
    se = math.sqrt(row["seed_std"] ** 2 / 5)
    by_hand = max(stats.t.sf((row["diff"] + 0.01) / se, 4), stats.t.sf((0.01 - row["diff"]) / se, 4))
    assert raw[0] == pytest.approx(by_hand)
    assert equivalence_p(0.02, 0.0, 0.0, 5, 0.01) == 1.0 and equivalence_p(0.005, 0.0, 0.0, 5, 0.01) == 0.0
    assert math.isnan(equivalence_p(0.0, math.nan, 0.0, 1, 0.01))


def test_equivalence_is_claimed_at_most_5_percent_of_the_time_when_the_difference_is_the_margin():
    # Simulated seeds, measured: a true difference exactly at the margin is called equivalent in at
    # most 5% of runs (the test's promise); one well inside it, most of the time.
    from harness.outputs.statistics import equivalence_p

    rng = np.random.default_rng(0)

    def claimed(true_diff: float, spread: float, seeds: int = 5, runs: int = 2000) -> float:
        diffs = true_diff + rng.normal(0, spread, size=(runs, seeds))
        return float(np.mean([equivalence_p(d.mean(), d.std(ddof=1), 0.0, seeds, 0.01) < 0.05 for d in diffs]))

    assert claimed(0.01, 0.01) <= 0.05 + 0.015  # binomial sd at 5% over 2000 runs: 0.5 points
    assert claimed(-0.01, 0.004) <= 0.05 + 0.015
    assert claimed(0.0, 0.0025) >= 0.9


def test_the_verdict_names_equivalent_pairs_and_says_when_none_is():
    from harness.outputs.statistics import mark_equivalence
    from harness.outputs.verdict_text import verdict

    _, pairs = across_seeds(_seed_table({"a": 0.80, "b": 0.801, "c": 0.70}, seeds=5, spread=0.002), "val_iou")
    text = verdict(mark_equivalence(pairs, 0.01), "val_iou")
    assert ("Equivalent within ±0.01 in val_iou (output.equivalence_margin), their difference inside it with 95% confidence "
            "(two one-sided tests, Holm-adjusted), 1 of 3 pairs: a over b (") in text, text
    assert "supported too" not in text
    # A supported difference smaller than the margin is both: real, and smaller than what matters.
    text = verdict(mark_equivalence(pairs, 0.2), "val_iou")
    assert "3 of 3 pairs" in text and "Of these, supported too, a real difference smaller than the margin: a and c, b and c." in text, text
    text = verdict(mark_equivalence(pairs, 0.0001), "val_iou")
    assert "No pair is shown equivalent within ±0.0001 in val_iou (output.equivalence_margin)" in text, text
    assert "equivalent" not in verdict(pairs, "val_iou").lower()


def test_the_equivalence_margin_must_be_above_zero():
    from harness.errors import ConfigError

    assert validate_config(tiny_config(output={"equivalence_margin": 0.01})).output.equivalence_margin == 0.01
    with pytest.raises(ConfigError, match="equivalence_margin"):
        validate_config(tiny_config(output={"equivalence_margin": 0}))


def test_compare_pairs_tests_equivalence_only_on_a_margin_every_run_set_for_the_metric_compared():
    from types import SimpleNamespace

    from harness.outputs.cross_run import _shared_margin

    def scores(margin, rank="val_iou"):
        return SimpleNamespace(config=SimpleNamespace(output=SimpleNamespace(equivalence_margin=margin), ranking_column=lambda: rank))

    assert _shared_margin([scores(0.01), scores(0.01)], "val_iou") == 0.01
    assert _shared_margin([scores(0.01), scores(0.02)], "val_iou") is None  # which would it be?
    assert _shared_margin([scores(0.01), scores(None)], "val_iou") is None
    assert _shared_margin([scores(0.01, "test_iou"), scores(0.01, "test_iou")], "val_f1") is None  # in another metric's units


def test_a_pairs_word_says_whether_it_is_inside_the_equivalence_margin():
    from harness.outputs.statistics import mark_equivalence
    from harness.outputs.verdict_text import chosen_pairs_text, pair_word

    _, pairs = across_seeds(_seed_table({"a": 0.80, "b": 0.801, "c": 0.70}, seeds=5, spread=0.002), "val_iou")
    words = {(r.model_a, r.model_b): pair_word(r) for r in mark_equivalence(pairs, 0.2).itertuples(index=False)}
    assert words == {("a", "b"): "equivalent", ("a", "c"): "supported, within the margin", ("b", "c"): "supported, within the margin"}
    assert [pair_word(r) for r in pairs.itertuples(index=False)] == ["not supported", "supported", "supported"]  # no margin
    assert "a over b (+0.0000 [-0.0007, +0.0007]), better in 1 of 5 seeds: equivalent" in chosen_pairs_text(mark_equivalence(pairs, 0.2), "val_iou")
