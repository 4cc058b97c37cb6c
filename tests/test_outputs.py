"""Comparison outputs: ranked tables with repeats, pairs, plots, report.html, TensorBoard, MLflow,
`harness compare` and `harness report`."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import run_main, tiny_config, write_yaml

from harness.api import run
from harness.core.backend import onednn_enabled
from harness.config.loading import validate_config
from harness.outputs.plots import pareto_front
from harness.outputs.statistics import seed_interval
from harness.outputs.printed import per_group_lines, print_summary
from harness.outputs.verdict_text import verdict
from harness.outputs.tables import build_pairs, build_summary, failed, finished, model_status, save_table
from harness.outputs.uncertainty import ranking_statistics
from harness.rundir import RunDir, read_csv, this_machine

STEPS = 8


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    """Three tiny models, two seeds each, with TensorBoard and a local MLflow store."""
    folder = tmp_path_factory.mktemp("outputs")
    raw = tiny_config(train={"repeats": 2}, output={"probe_steps": 2, "sample_images": 2, "plot_formats": ["png", "svg"], "mlflow": {"tracking_uri": f"file:{folder / 'mlruns'}"}})
    return run(validate_config(raw), results_dir=folder / "results"), folder


@pytest.mark.slow
def test_summary_ranks_models_with_spread_across_seeds(repeated):
    result, _ = repeated
    summary = read_csv(result.run_dir / "summary.csv")
    assert summary["rank"].tolist() == [1, 2, 3]
    assert summary["val_iou"].is_monotonic_decreasing
    assert (summary["repeats"] == 2).all()
    for column in ("val_iou_std", "val_iou_low", "val_iou_high", "flops_per_example", "images_per_s", "ms_per_step", "params", "indistinguishable_from"):
        assert column in summary, column
    assert (summary["flops_per_example"] > 0).all() and (summary["images_per_s"] > 0).all()
    members = result.summary_members  # the API's reading of summary_members.csv
    assert members.equals(read_csv(result.run_dir / "summary_members.csv"))
    assert sorted(members["model"]) == sorted(f"{m}@{r}" for m in ("fcn", "unet", "deconv") for r in (1, 2))
    # the per-model value is the mean of its seeds
    unet = members[members["model"].str.startswith("unet@")]["val_iou"].mean()
    assert summary.set_index("model").loc["unet", "val_iou"] == pytest.approx(unet)


@pytest.mark.slow
@pytest.mark.parametrize("repeats", [2, 1])
def test_a_model_stopped_early_is_compared_and_one_a_race_dropped_is_not(repeated, repeats):
    """With repeats a model stopped early by every seed still gets its intervals and its pairs (it
    lost both once: only `ok` counted); a dropped one keeps neither. With one seed (here each
    member taken as a model of its own) the dropped one keeps its interval, not its pairs."""
    result, _ = repeated
    config = RunDir(result.run_dir).read_config()
    config = config.model_copy(update={"train": config.train.model_copy(update={"repeats": repeats})})
    members = read_csv(result.run_dir / "summary_members.csv")
    deconv = members["model"].str.startswith("deconv@")
    for status, compared in (("stopped", True), ("dropped", False)):
        marked = members.assign(status=np.where(deconv, status, "ok"))
        intervals, pairs = ranking_statistics(result.run_dir / "val_scores.csv", config, marked, config.ranking_column())
        involved = pairs["model_a"].str.startswith("deconv") | pairs["model_b"].str.startswith("deconv")
        assert bool(involved.any()) is compared, status
        assert len(pairs) == {(2, True): 3, (2, False): 1, (1, True): 15, (1, False): 6}[(repeats, compared)]  # 3 models, or 6 members
        has_interval = intervals["model"].str.startswith("deconv").any() if intervals is not None else False
        assert bool(has_interval) is (compared or repeats == 1), status


def test_a_models_status_over_its_seeds_names_each_ending_worst_first():
    assert model_status(["ok", "ok"]) == "ok" and model_status(["stopped"]) == "stopped"
    # once the most common ending won and hid the divergence (`stopped (3/3)`)
    mixed = model_status(["stopped", "diverged", "stopped"])
    assert mixed == "diverged (1/3), stopped (2/3)"
    assert not finished(mixed) and failed(mixed)
    assert finished("stopped (2/3)") and not failed("stopped (2/3)") and finished("ok")
    assert not finished("dropped (2/2)") and not failed("dropped (2/2)") and failed("oom")


def test_with_fewer_than_two_finished_models_the_verdict_says_why_there_is_none(tmp_path):
    summary = pd.DataFrame({"model": ["unet", "fcn", "deconv"], "status": ["ok", "dropped (2/2)", "diverged"],
                            "compare_group": ["arch=unet", "arch=fcn", "arch=fcn"], "chosen_in_group": [True, False, False]})
    text = verdict(pd.DataFrame(columns=["model_a", "model_b"]), "val_iou", summary)
    assert text.startswith("No verdict between models: only unet finished") and "fcn: dropped (2/2), deconv: diverged" in text
    assert verdict(pd.DataFrame(), "val_iou", summary.assign(status="ok")).startswith("No interval for val_iou")
    none = verdict(pd.DataFrame(columns=["model_a", "model_b"]), "val_iou", summary.assign(status="diverged"))
    assert none.startswith("No verdict between models: none finished (unet: diverged, fcn: diverged, deconv: diverged)") and "the others" not in none
    assert "arch=unet: unet, arch=fcn: none finished." in per_group_lines(summary, tmp_path)
    one_seed = pd.DataFrame({"model_a": ["unet"], "model_b": ["psp"], "diff": [0.1], "diff_low": [0.05], "diff_high": [0.15],
                             "covers": ["validation images only"], "supported": [False], "beyond_image_noise": [True]})
    text = verdict(one_seed, "val_iou", pd.concat([summary, pd.DataFrame({"model": ["psp"], "status": ["ok"]})]))
    assert text.endswith("Not compared, as they did not finish (a score from fewer steps): fcn (dropped (2/2)), deconv (diverged).")


def test_a_seed_that_diverged_is_left_out_of_its_models_score_as_of_its_interval_and_the_verdict_says_so():
    members = pd.DataFrame({
        "model": ["unet@1", "unet@2", "unet@3", "fcn@1", "fcn@2", "fcn@3"],
        "status": ["ok", "diverged", "ok", "ok", "ok", "ok"],
        "val_iou": [0.60, 0.05, 0.62, 0.50, 0.52, 0.51], "params": [10, 10, 10, 5, 5, 5],
    })
    summary = build_summary(members).set_index("model")
    assert summary.loc["unet", "val_iou"] == pytest.approx(0.61)  # not 0.4233 with the diverged seed's score
    assert summary.loc["unet", "status"] == "diverged (1/3)" and summary.loc["unet", "repeats"] == 3
    all_failed = build_summary(members.assign(status="diverged")).set_index("model")
    assert all_failed.loc["unet", "val_iou"] == pytest.approx(0.4233, abs=1e-4)  # nothing finished: every seed's last score
    pairs = pd.DataFrame({"model_a": ["unet"], "model_b": ["fcn"], "metric": ["val_iou"], "diff": [0.1], "diff_low": [0.05], "diff_high": [0.15],
                          "covers": ["training seeds and validation images"], "supported": [True], "seeds": [2], "seeds_a_better": [2], "seeds_b_better": [0]})
    text = verdict(pairs, "val_iou", summary.reset_index())
    assert "Not every seed finished: unet diverged (1/3)." in text and "left out of its score, interval and pairs" in text
    assert "Seed-to-seed spread (std): unet 0.0141, fcn 0.0100." in text
    close = verdict(pairs, "val_iou", build_summary(members.assign(val_iou=[0.5, 0.5, 0.50002, 0.4, 0.4, 0.4])))
    assert "unet 1.4e-05, fcn 0.0000." in close  # not 0.0000: these seeds are not identical
    # A model none of whose seeds finished has no spread: diverged seeds frozen alike read as seeds that agree.
    unet_failed = members.assign(status=["diverged"] * 3 + ["ok"] * 3, val_iou=[0.0, 0.0, 0.0, 0.50, 0.52, 0.51])
    failed_summary = build_summary(unet_failed).set_index("model")
    assert failed_summary.loc["unet", ["val_iou_std", "val_iou_low", "val_iou_high"]].isna().all()
    assert failed_summary.loc["fcn", "val_iou_std"] == pytest.approx(0.01)
    text = verdict(pairs, "val_iou", failed_summary.reset_index())
    assert "Seed-to-seed spread (std): fcn 0.0100." in text and "unet diverged (3/3)" in text


def test_steps_stay_whole_numbers_in_the_summary_and_when_it_is_read_back(tmp_path):
    """selected_step (where the weights the test split scored came from) is a step, as steps and
    best_step are: it was written 64.0, and with repeats a seeds' mean with every digit."""
    from harness.outputs.tables import load_summary

    members = pd.DataFrame({"model": ["unet@1", "unet@2", "unet@3", "fcn@1", "fcn@2", "fcn@3"], "status": ["ok"] * 6,
                            "val_iou": [0.6, 0.61, 0.62, 0.5, 0.52, 0.51], "steps": [64, 48, 48, 64, 64, 64],
                            "selected_step": [64.0, 16.0, 24.0, 64.0, 48.0, 64.0]})
    summary = build_summary(members).set_index("model")
    assert summary.loc["unet", "selected_step"] == 35 and summary.loc["unet", "steps"] == 53  # the seeds' means, rounded
    save_table(summary.reset_index(), tmp_path / "summary.csv")
    assert ",35," in (tmp_path / "summary.csv").read_text() and ",35.0" not in (tmp_path / "summary.csv").read_text()
    assert str(load_summary(tmp_path / "summary.csv")["selected_step"].dtype) == "Int64"


def test_a_seed_far_from_its_models_others_is_named_in_the_summary_and_the_verdict_and_kept_in_its_score():
    values = [0.586, 0.441, 0.601, 0.612, 0.620, 0.630, 0.644, 0.656]
    members = pd.DataFrame({"model": [f"deconv@{r}" for r in range(1, 9)] + [f"fcn@{r}" for r in range(1, 9)], "status": "ok",
                            "test_iou": values + [0.50 + 0.01 * r for r in range(8)]})
    summary = build_summary(members, "test_iou").set_index("model")
    assert summary.loc["deconv", "unusual_seeds"].startswith("deconv@2 0.4410 (its others 0.5860-0.6560, p_holm 0.00")
    assert pd.isna(summary.loc["fcn", "unusual_seeds"]) and summary.loc["deconv", "test_iou"] == pytest.approx(np.mean(values))
    pairs = pd.DataFrame({"model_a": ["deconv"], "model_b": ["fcn"], "metric": ["test_iou"], "diff": [0.06], "diff_low": [0.01], "diff_high": [0.11],
                          "covers": ["training seeds and test images"], "supported": [True], "seeds": [8], "seeds_a_better": [7], "seeds_b_better": [1]})
    text = verdict(pairs, "test_iou", summary.reset_index())
    assert "Far from their model's other seeds in test_iou (each seed against its others' spread, over 5 seeds or more): deconv@2 0.4410" in text
    assert "Far from" not in verdict(pairs, "test_iou", build_summary(members.iloc[[0, 1, 2, 8, 9, 10]], "test_iou"))  # 3 seeds cannot tell


def test_a_models_cost_over_seeds_is_written_without_binary_noise():
    members = pd.DataFrame({"model": ["unet@1", "unet@2"], "status": ["ok", "ok"], "val_iou": [0.6, 0.7],
                            "ms_per_step": [28.607, 13.633], "images_per_s": [279.7, 239.9]})
    summary = build_summary(members).set_index("model")
    assert str(summary.loc["unet", "ms_per_step"]) == "21.12" and str(summary.loc["unet", "images_per_s"]) == "259.8"
    assert summary.loc["unet", "val_iou"] == (0.6 + 0.7) / 2  # a score keeps every digit


def test_a_pair_keeps_its_interval_whichever_way_round_its_statistics_name_it():
    # pix2pix trains on its own loss: its common-loss rows (compare_loss) come after the others'
    # loss rows, so the loss pairs name it last; the score tables name it first. Once merged by
    # (model_a, model_b) only, its two pairs lost their intervals and left the verdict.
    steps = [1, 2, 3, 4]
    losses = pd.DataFrame(
        [{"step": t, "epoch": 1, "model": m, "split": "train", "metric": "loss", "value": v + 0.01 * t} for m, v in (("unet", 0.5), ("linknet", 0.6)) for t in steps]
        + [{"step": t, "epoch": 1, "model": "pix2pix", "split": "train", "metric": "compare_loss", "value": 0.9} for t in steps]
        + [{"step": t, "epoch": 1, "model": "pix2pix", "split": "train", "metric": "loss", "value": 3.0} for t in steps])
    stats = pd.DataFrame({"model_a": ["pix2pix", "pix2pix", "unet"], "model_b": ["unet", "linknet", "linknet"], "diff": [-0.1, -0.07, 0.03], "supported": [False] * 3})
    pairs = build_pairs(losses, "bce+dice", stats).set_index(["model_a", "model_b"])
    assert pairs["diff"].notna().all() and len(pairs) == 3
    assert pairs.loc[("pix2pix", "unet"), "diff"] == -0.1
    assert pairs.loc[("pix2pix", "unet"), "mean_loss_diff"] == pytest.approx(0.9 - 0.525)  # the loss side turned round too
    assert pairs.loc[("pix2pix", "unet"), "a_beats_b"] == 0.0


def test_a_pair_with_one_seed_finished_in_both_is_said_apart_and_left_out_of_holm():
    covers = "training seeds and validation images"
    pairs = pd.DataFrame({"model_a": ["unet", "fcn"], "model_b": ["fcn", "flaky"], "metric": ["val_iou"] * 2, "seeds": [4, 1],
                          "diff": [0.02, 0.15], "diff_low": [-0.01, np.nan], "diff_high": [0.05, np.nan], "covers": [covers] * 2,
                          "seeds_a_better": [4, 1], "seeds_b_better": [0, 0], "p_t": [0.1, np.nan], "p_holm": [0.1, np.nan],
                          "supported": [False, False], "repeats_to_resolve": [37.0, np.nan]})
    text = verdict(pairs, "val_iou")
    # once: "Holm-adjusted across 2 pairs", and "fcn over flaky (+0.1500 [+nan, +nan]) ... no number of repeats is likely"
    assert "Holm-adjusted across 1 pair)" in text and "[+nan" not in text and "no number of repeats" not in text
    assert "Too few seeds finished in both for an interval: fcn and flaky (1 seed)." in text


def test_the_pair_differences_figure_names_each_pair_as_the_verdict_does_better_first():
    """The verdict said "unet over fcn (+0.0132 ...)" and the figure beside it drew "fcn - unet" at
    -0.0132: pairs.csv's order (the config's), which a reader had to turn round."""
    import matplotlib.pyplot as plt

    from harness.outputs.plots import plot_pair_differences

    pairs = pd.DataFrame({"model_a": ["fcn", "fcn", "unet"], "model_b": ["unet", "deconv", "deconv"], "metric": ["test_iou"] * 3,
                          "diff": [-0.0132, 0.0010, 0.0142], "diff_low": [-0.0400, -0.0075, -0.0148], "diff_high": [0.0135, 0.0094, 0.0432],
                          "seeds_a_better": [0, 2, 3], "seeds_b_better": [3, 1, 0], "supported": [False, False, False]})
    text = verdict(pairs.assign(covers="training seeds and test images", seeds=3, p_t=0.2, p_holm=0.5, repeats_to_resolve=np.inf), "test_iou")
    assert "unet over fcn (+0.0132 [-0.0135, +0.0400])" in text
    fig, ax = plt.subplots()
    plot_pair_differences(ax, pairs)
    labels = [t.get_text() for t in ax.get_yticklabels()][::-1]  # drawn bottom up
    assert labels == ["unet - fcn", "fcn - deconv", "unet - deconv"]
    drawn = sorted(round(float(x), 4) for bars in ax.containers for x in bars.lines[0].get_xdata())  # the points, not the caps
    assert drawn == [0.001, 0.0132, 0.0142] and "(better - worse)" in ax.get_xlabel()
    plt.close(fig)
    # A loss ranks lower first: its better model's difference is below zero.
    from harness.outputs.verdict_text import better_first

    turned = better_first(pairs.assign(mean_loss_diff=[0.05, -0.01, -0.02], a_beats_b=[0.25, 0.6, 0.7]))
    assert turned.loc[0, ["mean_loss_diff", "a_beats_b"]].tolist() == [-0.05, 0.75]  # unet's loss lower on 75% of the batches
    losses = better_first(pairs.assign(metric="val_loss"))
    assert losses["model_a"].tolist() == ["fcn", "deconv", "deconv"] and (losses["diff"] <= 0).all()
    assert losses.loc[1, ["diff_low", "diff_high"]].tolist() == [-0.0094, 0.0075] and losses.loc[1, "seeds_a_better"] == 1
    # A model none of whose seeds finished has pairs with no metric and no difference (pairs.csv's
    # common-loss rows): they are kept as they are, and the figure leaves them out.
    failed = pd.concat([pairs, pd.DataFrame({"model_a": ["fcn"], "model_b": ["gan"], "metric": [np.nan], "diff": [np.nan]})], ignore_index=True)
    assert better_first(failed).loc[3, ["model_a", "model_b"]].tolist() == ["fcn", "gan"]
    fig, ax = plt.subplots()
    plot_pair_differences(ax, failed)
    assert [t.get_text() for t in ax.get_yticklabels()][::-1] == ["unet - fcn", "fcn - deconv", "unet - deconv"]
    plt.close(fig)


def test_the_pair_differences_figure_says_what_its_intervals_cover_and_what_supports_a_pair():
    """An interval clear of 0 drawn grey, under a title that said only "solid: supported": the
    adjustment across pairs, and that one seed supports nothing, were nowhere on the figure."""
    import matplotlib.pyplot as plt

    from harness.outputs.plots import plot_pair_differences

    pairs = pd.DataFrame({"model_a": ["fcn", "fcn", "unet"], "model_b": ["unet", "deconv", "deconv"], "metric": ["test_iou"] * 3,
                          "diff": [0.004, 0.001, 0.014], "diff_low": [0.001, -0.007, -0.014], "diff_high": [0.007, 0.009, 0.043],
                          "covers": ["training seeds and test images"] * 3, "p_holm": [0.12, 0.9, 0.9], "supported": [False] * 3})
    fig, ax = plt.subplots()
    plot_pair_differences(ax, pairs)
    assert ax.get_title().splitlines()[1:] == ["95% intervals of training seeds and test images",
                                               "supported: Holm-adjusted across 3 pairs (a bar clear of 0 may not be)"]
    plt.close(fig)
    one_seed = pairs.assign(covers="validation images only (one training seed: training randomness not measured)", p_holm=np.nan)
    fig, ax = plt.subplots()
    plot_pair_differences(ax, one_seed)
    assert ax.get_title().splitlines()[1:] == ["95% intervals of validation images only",
                                               "(one training seed: training randomness not measured): none is supported"]
    plt.close(fig)


def test_a_model_that_did_not_finish_ranks_after_those_that_did_whatever_its_score():
    """A model diverged after a good validation ranked first and `harness runs` named it best,
    though the verdict compares it with nothing (its scores are from fewer steps)."""
    from rich.console import Console

    members = pd.DataFrame({"model": ["unet", "fcn", "deconv"], "status": ["diverged", "ok", "stopped"], "val_iou": [0.9, 0.5, 0.6]})
    summary = build_summary(members)
    assert summary["model"].tolist() == ["deconv", "fcn", "unet"]
    console = Console(record=True, width=200)
    print_summary(summary, "val_iou", console=console)
    assert "ranked by val_iou, best first, the models that diverged or ran out of memory last" in console.export_text()
    # With repeats, a model with a seed that finished is ranked by those seeds; one with none comes last.
    seeds = pd.DataFrame({"model": ["unet@1", "unet@2", "fcn@1", "fcn@2", "psp@1", "psp@2"], "status": ["diverged", "ok", "ok", "ok", "oom", "diverged"],
                          "val_iou": [0.1, 0.9, 0.5, 0.6, 0.95, 0.97]})
    assert build_summary(seeds)["model"].tolist() == ["unet", "fcn", "psp"]


def test_a_races_ranking_says_its_finishers_come_first():
    from rich.console import Console

    summary = pd.DataFrame({"rank": [1, 2], "model": ["unet", "fcn"], "val_iou": [0.4, 0.5], "status": ["ok", "dropped"]})
    console = Console(record=True, width=200)
    print_summary(summary, "val_iou", console=console)
    assert "ranked by val_iou, best first: the race's finishers, then the dropped" in console.export_text()
    console = Console(record=True, width=200)
    print_summary(summary.assign(status="ok"), "val_iou", console=console)
    assert "ranked by val_iou, best first, every model trained to its end (" in console.export_text()



def test_a_run_of_one_model_says_what_its_interval_covers_at_the_terminal_and_in_the_report(tmp_path):
    """One model has no pair: the terminal said nothing under its ranked row, and the report "No
    interval for test_iou" beside a table that showed one."""
    from rich.console import Console

    from harness.rundir import RunRecord

    seeds = pd.DataFrame({"rank": [1], "model": ["fcn"], "status": ["ok"], "repeats": [3], "test_iou": [0.1315], "test_iou_std": [0.0068],
                          "test_iou_low": [0.0765], "test_iou_high": [0.1865], "interval_covers": ["training seeds and test images"]})
    no_pairs = pd.DataFrame(columns=["model_a", "model_b", "compared_on"])
    text = verdict(no_pairs, "test_iou", seeds)
    assert text == ("One model, so nothing to compare: the interval of its test_iou covers training seeds and test images. "
                    "Seed-to-seed spread (std) over 3 training seeds: 0.0068.")
    one_seed = seeds.drop(columns="test_iou_std").assign(repeats=1, interval_covers="test images only (one training seed: training randomness not measured)")
    assert verdict(no_pairs, "test_iou", one_seed).endswith("training randomness not measured). To measure how its score moves with "
                                                            "training randomness (initial weights, data order), set train.repeats: 3 or more.")
    assert verdict(no_pairs, "test_iou", seeds.drop(columns=["test_iou_low", "test_iou_high"])).startswith("No interval for test_iou")
    RunDir(tmp_path).write_record(RunRecord(name="tiny", run_id="r1", status="completed"))
    write_yaml(tmp_path / "config.yaml", tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn"}], train={"repeats": 3}))
    save_table(no_pairs, tmp_path / "pairs.csv")
    console = Console(record=True, width=250)
    print_summary(seeds, "test_iou", run_dir=tmp_path, console=console)
    assert text in console.export_text()


def test_the_ranking_of_a_race_stopped_between_rungs_calls_nobody_a_finisher(tmp_path):
    """An interrupted race's members that were not dropped have not finished it either."""
    from rich.console import Console

    from harness.rundir import RunDir, RunRecord

    RunDir(tmp_path).write_record(RunRecord(name="race", run_id="r1", status="interrupted", total_steps=320, steps_done=128))
    summary = pd.DataFrame({"rank": [1, 2], "model": ["unet", "fcn"], "val_iou": [0.4, 0.5], "status": ["ok", "dropped"]})
    console = Console(record=True, width=200)
    print_summary(summary, "val_iou", run_dir=tmp_path, console=console)
    assert "ranked by val_iou, best first: the models still racing, then the dropped, later rungs first (" in console.export_text()
    console = Console(record=True, width=200)
    print_summary(summary.assign(status="ok"), "val_iou", run_dir=tmp_path, console=console)
    assert "ranked by val_iou, best first (" in console.export_text()


def test_interval_is_a_student_t_interval_widened_by_image_noise():
    seeds_only = seed_interval([1.0, 2.0, 3.0])
    assert seeds_only.seed_std == pytest.approx(1.0)
    assert seeds_only.high - seeds_only.mean == pytest.approx(4.302653 / math.sqrt(3))  # t(0.975, 2 dof), from a table
    with_images = seed_interval([1.0, 2.0, 3.0], image_se=1.0)
    assert with_images.high - with_images.mean == pytest.approx(4.302653 * math.sqrt(1 / 3 + 1))
    assert math.isnan(seed_interval([1.0]).low)


@pytest.mark.slow
def test_a_splits_iou_and_f1_are_pooled_over_its_images_as_the_docs_say(repeated):
    """docs/comparing.md, "What the scores are": intersections and unions summed over the images,
    then divided; not the mean of the per-image rows."""
    result, _ = repeated
    scores = read_csv(result.run_dir / "val_scores.csv")
    last = scores[scores["step"] == scores["step"].max()].groupby("model")[["intersection", "predicted", "truth", "iou"]].agg(
        {"intersection": "sum", "predicted": "sum", "truth": "sum", "iou": "mean"})
    members = read_csv(result.run_dir / "summary_members.csv").set_index("model")
    pooled = last["intersection"] / (last["predicted"] + last["truth"] - last["intersection"])
    assert np.allclose(members.loc[last.index, "val_iou"], pooled, rtol=0, atol=1e-9)
    assert np.allclose(members.loc[last.index, "val_f1"], 2 * last["intersection"] / (last["predicted"] + last["truth"]), rtol=0, atol=1e-9)
    assert not np.allclose(pooled, last["iou"], rtol=0, atol=1e-6)  # the mean of per-image IoUs is another number


@pytest.mark.slow
def test_pairs_compare_losses_on_the_same_batches(repeated):
    result, _ = repeated
    pairs = read_csv(result.run_dir / "pairs.csv")
    assert len(pairs) == 3 and (pairs["steps"] == STEPS).all()
    losses = result.losses.query("split == 'train' and metric == 'loss'").copy()
    losses["base"] = losses["model"].str.split("@").str[0]
    per_step = losses.groupby(["step", "base"])["value"].mean().unstack()
    row = pairs[(pairs["model_a"] == "fcn") & (pairs["model_b"] == "unet")].iloc[0]
    diff = per_step["fcn"] - per_step["unet"]
    assert row["mean_loss_diff"] == pytest.approx(diff.mean())
    assert row["a_beats_b"] == pytest.approx((diff < 0).mean())


def test_pairs_skip_steps_after_a_model_stopped():
    losses = pd.DataFrame(
        {"step": [1, 2, 1], "epoch": 1, "model": ["a", "a", "b"], "split": "train", "metric": "loss", "value": [1.0, 0.5, 2.0]}
    )
    row = build_pairs(losses).iloc[0]
    assert row["steps"] == 1 and row["a_beats_b"] == 1.0


def test_pareto_front_keeps_only_unbeaten_models():
    points = pd.DataFrame({"model": list("abcd"), "params": [1, 2, 3, 4], "val_iou": [0.5, 0.4, 0.7, 0.6]})
    assert pareto_front(points, "params", "val_iou")["model"].tolist() == ["a", "c"]


@pytest.mark.slow
def test_plots_are_written_as_png_and_svg_when_asked(repeated):
    result, _ = repeated
    plots = result.run_dir / "plots"
    for stem in ("loss_curves", "val_metrics", "final_val_iou", "quality_vs_cost", "samples"):
        assert (plots / f"{stem}.png").stat().st_size > 5000, stem
        assert (plots / f"{stem}.svg").read_text().lstrip().startswith(("<?xml", "<svg")), stem


@pytest.mark.slow
def test_tensorboard_events_read_back_with_tensorboards_reader(repeated):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, _ = repeated
    assert sorted(p.name for p in (result.run_dir / "tb").iterdir()) == sorted(f"{m}@{r}" for m in ("fcn", "unet", "deconv") for r in (1, 2))
    events = EventAccumulator(str(result.run_dir / "tb" / "unet@1"))
    events.Reload()
    assert {"train/loss", "train/lr", "val/loss", "val/iou", "val/f1"} <= set(events.Tags()["tensors"])
    logged = [(e.step, float(np.asarray(tf_value(e)))) for e in events.Tensors("train/loss")]
    expected = result.losses.query("model == 'unet@1' and split == 'train' and metric == 'loss'").sort_values("step")
    assert [s for s, _ in logged] == expected["step"].tolist()
    np.testing.assert_allclose([v for _, v in logged], expected["value"], rtol=1e-6)
    hparams = events.PluginTagToContent("hparams")  # serialized HParamsPluginData, one per tag
    assert any(b"tiny_unet" in content for content in hparams.values()), hparams
    second = session_hparams(result.run_dir / "tb" / "unet@2")  # which model and seed, for grouping
    seed = result.info["config"]["seed"]
    assert (second["model"], second["repeat"], second["training_seed"], second["arch"]) == ("unet", 2, seed + 1, "tiny_unet")


def session_hparams(folder) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(folder))
    events.Reload()
    for content in events.PluginTagToContent("hparams").values():
        start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        if start.hparams:
            return {k: (v.string_value if v.HasField("string_value") else int(v.number_value)) for k, v in start.hparams.items() if k != "learning_rate"}
    raise AssertionError(f"no hparams in {folder}")


def tf_value(event):
    from tensorboard.util import tensor_util

    return tensor_util.make_ndarray(event.tensor_proto)


@pytest.mark.slow
def test_mlflow_has_a_parent_run_and_one_run_per_model(repeated):
    from mlflow.tracking import MlflowClient

    result, folder = repeated
    record = result.info["mlflow"]
    client = MlflowClient(tracking_uri=f"file:{folder / 'mlruns'}")
    parent = client.get_run(record["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.params["train.repeats"] == "2"
    assert parent.data.tags["harness.status"] == "completed"  # the run's, beside each member's own
    machine = parent.data.tags["harness.machine"]  # whose timings these are
    isa = this_machine()["cpu_isa"] or []  # its CPU's instruction sets too, where the system names them
    assert f" x{os.cpu_count()}" in machine and machine.endswith(", no GPU") and all(name in machine for name in isa)
    assert f"oneDNN {'on' if onednn_enabled() else 'off'}" in machine  # and whether its kernels were oneDNN's
    assert len(record["runs"]) == 6
    child = client.get_run(record["runs"]["fcn@1"])
    assert child.data.tags["mlflow.parentRunId"] == record["parent_run_id"] and child.data.tags["harness.status"] == "ok"
    params = child.data.params
    assert params["arch"] == "tiny_fcn" and params["optimizer.name"] == "adam" and "name" not in params
    assert "None" not in params.values() and "backbone" not in params  # unset settings are left out, not 'None'
    second = client.get_run(record["runs"]["unet@2"]).data.params  # which model and seed a run was, for grouping
    seed = int(parent.data.params["seed"])
    assert (params["model"], params["repeat"], params["training_seed"]) == ("fcn", "1", str(seed))
    assert (second["model"], second["repeat"], second["training_seed"]) == ("unet", "2", str(seed + 1))
    # The end: the member's summary row (summary_members.csv), the model's on the parent (across seeds)
    members = read_csv(result.run_dir / "summary_members.csv").set_index("model")
    final = child.data.metrics
    for column in ("best_val_loss", "params", "ms_per_step", "flops_per_example", "final_train_loss"):
        assert final[column] == pytest.approx(members.loc["fcn@1", column]), column
    assert "learning_rate" not in final  # a setting: a param
    assert [m.step for m in client.get_metric_history(record["runs"]["fcn@1"], "val_iou")] == sorted(set(result.losses.query("split == 'val'")["step"]))
    summary = read_csv(result.run_dir / "summary.csv").set_index("model")
    for column in ("val_iou", "val_iou_low", "val_iou_std", "rank", "ms_per_step"):
        assert parent.data.metrics[f"unet.{column}"] == pytest.approx(summary.loc["unet", column]), column
    history = client.get_metric_history(record["runs"]["fcn@1"], "train_loss")
    assert sorted(m.step for m in history) == list(range(1, STEPS + 1))  # each step once
    # Logged while the run trained: the first call (tracing) comes seconds before the last rows.
    stamps = {m.step: m.timestamp for m in history}
    assert stamps[STEPS] - stamps[1] > 200
    (listed,) = client.search_runs([parent.info.experiment_id], f"attributes.run_id = '{record['parent_run_id']}'")
    artifacts = {a.path for a in client.list_artifacts(listed.info.run_id)}
    assert {"report.html", "config.yaml", "summary.csv", "pairs.csv", "plots"} <= artifacts
    assert "plots/final_val_iou.png" in {a.path for a in client.list_artifacts(listed.info.run_id, "plots")}


@pytest.mark.slow
def test_report_is_self_contained(repeated):
    result, _ = repeated
    page = (result.run_dir / "report.html").read_text()
    sources = re.findall(r"<img[^>]*src='([^']*)'", page)
    assert len(sources) == 4 and all(s.startswith("data:image/png;base64,") for s in sources)  # the curves are charts
    assert len(re.findall(r"<figure class='chart'", page)) == 5
    assert "http://" not in page and "https://" not in page and "src='/" not in page
    for text in ("Summary", "Pairs, on the same batches", "tensorflow", "config fingerprint", "name: tiny", "Settings"):
        assert text in page


@pytest.mark.slow
def test_report_reads_well_at_1400_px_in_headless_chromium(repeated, tmp_path):
    """Opened as a reader would, 1400 px wide: every image decoded, every chart drawn, no horizontal
    overflow (the summary fits without scrolling), no script error; and the page's self-test clicks a
    legend entry (the model disappears from every chart), hovers a chart (its values show) and sorts
    the summary by model."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium package")
        pytest.skip("chromium not installed (apt-get install chromium)")
    result, _ = repeated
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--window-size=1400,900",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
    ]
    page = (result.run_dir / "report.html").as_uri() + "#selftest"
    done = subprocess.run([browser, *flags, page], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    body = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<body[^>]*>", done.stdout).group(0)))
    assert body["images"] == body["images-rendered"] == "4"  # final bars, pair differences, quality vs cost, samples
    assert body["charts"] == body["charts-rendered"] == "5"  # training loss, val f1, iou, loss, learning rate
    assert body["page-overflow"] == "0" and body["summary-overflow"] == "0"
    assert body["legend-ok"] == "1" and body["hover-ok"] == "1" and body["sort-ok"] == "1"
    assert body["errors"] == "0" and "Uncaught" not in done.stderr


@pytest.mark.slow
def test_compare_prints_and_saves_models_of_several_runs(repeated, tmp_path):
    result, _ = repeated
    out = tmp_path / "cmp.csv"
    copy = tmp_path / "tiny" / "20261101-000000"  # a second run: the same one given twice is refused
    shutil.copytree(result.run_dir, copy)
    done = run_main("compare", result.run_dir, copy, "--csv", out)
    assert done.returncode == 0, done.stderr
    assert "unet" in done.stdout and "best of each column" in done.stdout
    table = read_csv(out)
    assert len(table) == 6 and {"run", "model", "val_iou", "ms_per_step"} <= set(table.columns)
    missing = run_main("compare", tmp_path / "nothing")
    assert missing.returncode == 2 and f"{tmp_path / 'nothing'} does not exist" in missing.stderr


def copy_without_outputs(run_dir, folder):
    """A copy of the run with its plots, report and tables gone: for `harness report` to rebuild."""
    copy = folder / "run"
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "plots")
    for name in ("report.html", "summary.csv", "pairs.csv"):
        (copy / name).unlink()
    return copy


@pytest.mark.slow
def test_report_command_rebuilds_everything_from_disk(repeated, tmp_path):
    result, _ = repeated
    copy = copy_without_outputs(result.run_dir, tmp_path)
    done = run_main("report", copy)
    assert done.returncode == 0, done.stderr
    assert read_csv(copy / "summary.csv").equals(read_csv(result.run_dir / "summary.csv"))
    assert (copy / "plots" / "samples.png").exists(), "samples come back from the exported models"
    rebuilt = (copy / "report.html").read_text()
    assert len(re.findall(r"<img", rebuilt)) == 4 and len(re.findall(r"<figure class='chart'", rebuilt)) == 5


@pytest.mark.slow
def test_no_plot_formats_draws_nothing_and_leaves_the_tables_and_the_report_the_same(repeated, tmp_path):
    """`output.plot_formats: []`: the same tables to the byte, the report with its interactive
    curves and a line saying there are no plots, and no plots/ file (nor the models loaded for
    samples.png)."""
    result, _ = repeated
    copy = copy_without_outputs(result.run_dir, tmp_path)
    shutil.rmtree(copy / "models")  # were samples.png made, the models would be loaded: a warning would say they are missing
    config_file = copy / "config.yaml"
    config_file.write_text(config_file.read_text().replace("plot_formats:\n  - png\n  - svg\n", "plot_formats: []\n"))
    done = run_main("report", copy)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    for name in ("summary.csv", "pairs.csv"):
        assert (copy / name).read_bytes() == (result.run_dir / name).read_bytes(), name
    assert not (copy / "plots").exists() or not any((copy / "plots").iterdir())
    page = (copy / "report.html").read_text()
    assert "<img" not in page and "No plots: this run drew none" in page
    assert len(re.findall(r"<figure class='chart'", page)) == 5


def test_one_model_has_an_empty_pairs_table_with_columns():
    losses = pd.DataFrame({"step": [1], "epoch": 1, "model": ["a"], "split": "train", "metric": "loss", "value": [1.0]})
    pairs = build_pairs(losses)
    assert pairs.empty and list(pairs.columns)[:2] == ["model_a", "model_b"]


@pytest.mark.slow
def test_load_run_reads_a_run_back(repeated):
    from harness.api import load_run

    result, _ = repeated
    loaded = load_run(result.run_dir)
    pd.testing.assert_frame_equal(loaded.summary, read_csv(result.run_dir / "summary.csv"), check_dtype=False)
    assert str(loaded.summary["diverged_step"].dtype) == "Int64"  # integers with gaps stay integers
    assert loaded.info["status"] == "completed" and loaded.config.train.repeats == 2
    # Models by their members' names; the model's own name, or a missing file, says so (not a bare KeyError).
    assert "fcn@1" in loaded.models and "fcn" not in loaded.models and not loaded.models._loaded  # `in` loads nothing
    with pytest.raises(KeyError, match="fcn: trained with repeats, each seed's model is its own: fcn@1, fcn@2"):
        loaded.models["fcn"]
    with pytest.raises(KeyError, match="nope: no models/nope/model.keras in this run; its exported models: deconv@1"):
        loaded.models["nope"]
    with pytest.raises(KeyError, match="fcn: trained with repeats, each seed's model is its own: fcn@1, fcn@2"):
        result.models["fcn"]  # the trained models in memory, alike


def test_chart_ticks_on_steps_and_epochs_are_whole_numbers():
    from harness.outputs.html_charts import _whole_ticks

    assert _whole_ticks(1, 102) == [20.0, 40.0, 60.0, 80.0, 100.0]
    assert _whole_ticks(1, 2) == [1.0, 2.0] and _whole_ticks(0.5, 1.5) == [1.0]
    assert all(t == round(t) for t in _whole_ticks(3, 81))


def test_the_way_to_view_mlflow_names_the_store_as_mlflow_3_opens_it(tmp_path, monkeypatch):
    from harness.outputs.mlflow_log import view_command

    monkeypatch.chdir(tmp_path)
    assert view_command("file:./mlruns") == f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {tmp_path / 'mlruns'}  (the UI needs: pip install mlflow)"
    assert view_command("sqlite:///mlflow.db") == f"mlflow ui --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'}"
    assert view_command("sqlite:////abs/m.db") == "mlflow ui --backend-store-uri sqlite:////abs/m.db"
    assert view_command("http://tracking:5000") == "open http://tracking:5000 in a browser"


def test_identical_learning_rate_curves_are_one_line_labelled_with_every_model():
    from harness.outputs.plots import merge_identical

    steps = pd.Index([1, 2, 3], name="step")
    constant = pd.DataFrame({"mean": [1e-3] * 3}, index=steps)
    decaying = pd.DataFrame({"mean": [1e-3, 5e-4, 2.5e-4]}, index=steps)
    merged = merge_identical({"fcn": constant, "unet": constant.copy(), "deconv": decaying})
    assert list(merged) == ["fcn, unet (the same)", "deconv"]


def test_the_reports_run_facts_are_labelled_lines_not_json():
    from harness.outputs.report import _facts

    text = _facts({"steps_done": 8, "deterministic": True, "timing": {"first_call_s": 3.9, "fused_ms_per_step": 22.448},
                   "placement": {"strategy": "one_device", "models": {"fcn": ["/cpu:0"]}}, "resumes": [],
                   "hardware": {"host": "vm", "cpu": "Xeon", "cpus": 2, "gpus": []}})
    assert "steps done</td><td>8<" in text and "deterministic</td><td>yes<" in text
    assert "machine (whose timings these are)</td><td>host: vm<br>cpu: Xeon<br>cpus: 2<br>gpus: none<" in text
    assert "first call s: 3.9<br>fused ms per step: 22.448" in text and "models: fcn /cpu:0" in text
    assert "{" not in text and "[" not in text and "resumes" not in text  # no JSON; empty facts left out
    spread = _facts({"hardware": {"machines": [{"host": "vm", "cpu": "Xeon", "cpus": 2, "gpus": []}, {"host": "box", "cpu": "EPYC", "cpus": 64, "gpus": ["A100"]}]}})
    assert "these are)</td><td>vm: Xeon x2, no GPU<br>box: EPYC x64, A100<" in spread  # a run of groups Ray placed on two machines


def test_the_reports_settings_leave_out_what_the_source_and_the_optimizers_do_not_read():
    from harness.outputs.html_tables import settings_tables

    config = validate_config({"name": "t", "data": {"source": "synthetic", "train_size": 16, "val_size": 8}, "models": [
        {"name": "a", "arch": "tiny_fcn", "optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}},
        {"name": "b", "arch": "tiny_fcn", "optimizer": {"name": "adam", "learning_rate": 0.1}},
        {"name": "g", "kind": "gan", "arch": "tiny_unet"}, {"name": "c", "arch": "tiny_fcn", "grid": {"optimizer.learning_rate": [0.1, 0.2]}}]}).model_dump(mode="json")
    differing, shared = settings_tables(config)
    assert "data.val_fraction" not in shared and "data.test_fraction" not in shared  # synthetic: val_size, test_size
    assert shared["data.val_size"] == 8 and shared["data.max_shapes"] == 4
    by_model = differing.set_index("model")
    assert by_model.loc["a", "optimizer.momentum"] == 0.9 and pd.isna(by_model.loc["b", "optimizer.momentum"])  # Adam reads none
    assert pd.isna(by_model.loc["a", "optimizer.beta_1"]) and by_model.loc["b", "optimizer.beta_1"] == 0.9
    assert by_model.loc["g", "gan.discriminator_optimizer.beta_1"] == 0.5
    assert "gan.discriminator_optimizer.momentum" not in differing and "gan.discriminator_optimizer.momentum" not in shared
    assert by_model.loc["c-lr0.2", "optimizer.learning_rate"] == 0.2 and not any("grid_values" in k for k in [*differing, *shared])  # once


def test_samples_show_every_model_when_they_fit_else_the_best_in_ranking_order():
    from harness.outputs.derived import SAMPLE_MODELS, models_in_samples

    few = ["fcn", "unet", "deconv"]
    summary = pd.DataFrame({"model": ["unet", "deconv", "fcn"]})
    assert models_in_samples(few, summary, "val_iou") == (few, "validation samples: the same images for every model")
    many = [f"m{i}" for i in range(40)]
    ranked = pd.DataFrame({"model": list(reversed(many))})
    shown, title = models_in_samples(many, ranked, "val_iou")
    assert shown == list(reversed(many))[:SAMPLE_MODELS] == ["m39", "m38", "m37", "m36", "m35", "m34", "m33", "m32"]
    assert title == "validation samples: the 8 best of 40 models by val_iou (summary.csv ranks them all)"


def test_compare_shows_a_test_split_first_beside_the_validation_that_chose(tmp_path):
    from rich.console import Console

    from harness.outputs.compare import compare_runs, print_comparison

    run = tmp_path / "exp" / "20260101-000000"
    run.mkdir(parents=True)
    pd.DataFrame({"rank": [1, 2], "model": ["a", "b"], "status": ["ok", "ok"], "val_iou": [0.50, 0.60],
                  "test_iou": [0.55, 0.45], "test_f1": [0.7, 0.6]}).to_csv(run / "summary.csv", index=False)
    table = compare_runs([run])
    assert {"test_iou", "test_f1", "val_iou"} <= set(table.columns)
    console = Console(record=True, width=220)
    print_comparison(table, console)
    header = next(line for line in console.export_text().splitlines() if "model" in line)
    assert header.index("test_iou") < header.index("val_iou")  # ranked on test: its column first
    # The ranking column with each model's interval (in --csv and --json as columns of their own).
    pd.DataFrame({"rank": [1, 2], "model": ["a", "b"], "status": ["ok", "ok"], "val_iou": [0.50, 0.60], "test_iou": [0.55, 0.45],
                  "test_iou_low": [0.50, 0.40], "test_iou_high": [0.60, 0.50]}).to_csv(run / "summary.csv", index=False)
    table = compare_runs([run])
    assert table["test_iou_low"].tolist() == [0.50, 0.40]
    console = Console(record=True, width=220)
    print_comparison(table, console, ranked_by=["test_iou"])
    shown = console.export_text()
    assert "0.5500 [0.5000, 0.6000]" in shown and "0.4500 [0.4000, 0.5000]" in shown and "test_iou_low" not in shown


def test_the_samples_figure_keeps_its_title_and_shows_ignored_pixels_grey():
    # The panels' loop reused the name `title`: the figure's title was the last model's name
    # ("deconv"), never "validation samples: the 8 best of 40 models by val_iou ...".
    import numpy as np

    from harness.core.scores import mask_classes
    from harness.outputs.plots import plot_samples

    images = np.zeros((2, 8, 8, 3))
    masks = np.zeros((2, 8, 8, 1))
    masks[0, 0, :] = -1.0  # a row of data.ignore_label
    predictions = {"unet": np.full((2, 8, 8, 1), 0.9), "deconv": np.zeros((2, 8, 8, 1))}
    figure = plot_samples(images, masks, predictions, "validation samples: the 2 best of 5 models by val_iou")
    assert figure._suptitle.get_text() == "validation samples: the 2 best of 5 models by val_iou; grey: pixels of data.ignore_label, in no score"
    assert [ax.get_title() for ax in figure.axes[:4]] == ["image", "truth", "unet", "deconv"]
    assert np.isnan(mask_classes(masks[0])[0]).all() and not np.isnan(mask_classes(masks[0])[1:]).any()
    one_hot = np.zeros((4, 4, 3))
    one_hot[1:, :, 2] = 1.0  # row 0: no class (ignored)
    assert np.isnan(mask_classes(one_hot)[0]).all() and (mask_classes(one_hot)[1:] == 2).all()
    plain = plot_samples(images, np.zeros((2, 8, 8, 1)), predictions, "validation samples: the same images for every model")
    assert plain._suptitle.get_text() == "validation samples: the same images for every model"


def test_a_class_is_one_colour_in_every_panel_of_the_samples():
    """Each panel was scaled to its own highest class: a truth of class 1 alone and a prediction
    of class 2 were both drawn white. Now one colour per class in every panel, and a legend."""
    import numpy as np

    from harness.outputs.plots import plot_samples

    labels = np.zeros((2, 8, 8), int)
    labels[0, 1:3, 1:3], labels[1, 4:6, 4:6] = 1, 2
    truth, swapped = np.eye(3)[labels], np.eye(3)[np.where(labels > 0, 3 - labels, 0)]  # the model calls 1 class 2, and 2 class 1
    figure = plot_samples(np.zeros((2, 8, 8, 3)), truth, {"m": swapped})

    def colour(row, column, pixel):
        image = figure.axes[row * 3 + column].get_images()[0]
        return tuple(image.cmap(image.norm(image.get_array()[pixel])))

    class_1, class_2 = colour(0, 1, (1, 1)), colour(1, 1, (4, 4))
    assert class_1 != class_2 and colour(0, 2, (1, 1)) == class_2 and colour(1, 2, (4, 4)) == class_1
    assert colour(0, 1, (7, 7)) == colour(1, 2, (0, 0)) == (0.0, 0.0, 0.0, 1.0)  # background black everywhere
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["class 1", "class 2"]
    binary = plot_samples(np.zeros((1, 8, 8, 3)), (labels[:1, ..., None] > 0).astype(float), {"m": np.full((1, 8, 8, 1), 0.9)})
    image = binary.axes[1].get_images()[0]
    assert tuple(image.cmap(image.norm(1.0))) == (1.0, 1.0, 1.0, 1.0) and tuple(image.cmap(image.norm(0.0))) == (0.0, 0.0, 0.0, 1.0)
    assert not binary.legends


def test_the_samples_title_says_which_seed_and_which_weights():
    from harness.outputs.derived import samples_title

    plain = "validation samples: the same images for every model"
    assert samples_title(plain, 1, 0, False) == plain
    assert samples_title(plain, 3, 7, True) == (plain + "\neach model's first of 3 seeds (seed 7)"
                                                "\nwith the weights chosen on validation, which the test split scored")


def test_log_axis_labels_are_compact_and_do_not_run_together():
    # Params from 881 to 58.8k on a third of a figure: matplotlib's own labels read
    # "2000 3000 4000 6000 2e+04 3e+04 4e+04 6e+04", the last four overlapping.
    import matplotlib.pyplot as plt

    from harness.outputs.plots import compact_number, log_axis

    assert [compact_number(v) for v in (881, 20000, 1.5e6, 2e9, 0.25, 1.0, 0.001)] == ["881", "20k", "1.5M", "2G", "0.25", "1", "1e-03"]

    def labels(xs):
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter(xs, [0.85] * len(xs))
        log_axis(ax, "x")
        fig.canvas.draw()
        low, high = ax.get_xlim()
        shown = tuple([t.get_text() for t in ax.get_xticklabels(minor=m) if t.get_text() and low <= t.get_position()[0] <= high] for m in (False, True))
        plt.close(fig)
        return shown

    # The same labels whatever matplotlib's version (its LogFormatter's rule for 881-58.8k changed
    # between 3.10 and 3.11: the one labelled nothing between the decades, the other the 2s and 5s).
    assert labels([881, 12200, 58800]) == (["1k", "10k"], ["2k", "5k", "20k", "50k"])
    assert labels([2000, 5000]) == ([], ["2k", "3k", "4k", "5k"])  # within half a decade: every tick
    assert labels([10, 1e6]) == (["10", "100", "1k", "10k", "100k", "1M"], [])  # five decades: the decades alone


def test_the_ranking_bars_warn_that_overlapping_intervals_are_no_verdict_and_keep_values_off_the_bars():
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import figure_final

    summary = pd.DataFrame({"model": ["unet", "fcn"], "test_iou": [0.868, 0.854], "test_iou_low": [0.645, 0.630], "test_iou_high": [1.0, 1.0],
                            "interval_covers": ["training seeds and test images"] * 2})
    fig = figure_final(summary, "test_iou")
    ax = fig.axes[0]
    assert "overlapping intervals do not mean no difference: pairs in pair_differences.png" in ax.get_title()
    assert all(text.get_ha() == "left" for text in ax.texts)  # beside each error bar, not on its line
    plt.close(fig)
    fig = figure_final(summary.drop(columns=["test_iou_low", "test_iou_high"]), "test_iou")
    assert "overlapping" not in fig.axes[0].get_title() and all(text.get_ha() == "center" for text in fig.axes[0].texts)
    plt.close(fig)


def test_the_ranking_bars_show_each_finished_seeds_score_as_a_dot():
    """smoke with 20 seeds: deconv's bar read 0.275 [0.17, 0.38], and nothing showed that 3 of its
    20 seeds never learned (IoU 0 or near it)"""
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.figures import seed_scores, summary_figures
    from harness.outputs.plots import figure_final

    summary = pd.DataFrame({"model": ["fcn", "deconv"], "val_iou": [0.46, 0.27], "val_iou_low": [0.37, 0.17], "val_iou_high": [0.56, 0.38]})
    seeds = pd.DataFrame({"model": ["fcn@1", "fcn@2", "fcn@3", "deconv@1", "deconv@2", "deconv@3"], "val_iou": [0.4, 0.5, 0.48, 0.0, 0.4, 0.9],
                          "status": ["ok", "ok", "stopped", "ok", "ok", "diverged"]})
    dots = seed_scores(seeds, "val_iou")
    assert dots.to_dict("list") == {"model": ["fcn", "fcn", "fcn", "deconv", "deconv"], "value": [0.4, 0.5, 0.48, 0.0, 0.4]}  # not the diverged one
    (job,) = [j for j in summary_figures(summary, "val_iou", None, seeds) if j.figure == "figure_final"]
    fig = figure_final(*job.args)
    ax = fig.axes[0]
    import numpy as np

    xy = np.vstack([c.get_offsets() for c in ax.collections if type(c).__name__ == "PathCollection"])  # the error bars: LineCollections
    assert len(xy) == 5 and sorted(xy[:, 1].tolist()) == [0.0, 0.4, 0.4, 0.48, 0.5]
    assert all(-0.35 < x < 0 for x in xy[:3, 0]) and all(0.65 < x < 1 for x in xy[3:, 0])  # each over its bar, left of its label
    assert "dots: each training seed's score" in ax.get_title()
    plt.close(fig)
    assert summary_figures(summary, "val_iou", None)[0].args[2] is None  # one seed: no dots


class _Tensor:
    def __init__(self, array):
        self.array = array

    def numpy(self):
        return self.array

    def __len__(self):
        return len(self.array)


def test_samples_show_images_with_foreground_first_and_one_without_last():
    # Real tiles are often empty: the first four of real_images' validation images were three empty ones.
    import numpy as np

    from harness.outputs.derived import SAMPLE_POOL, sample_batch

    def batches(marked):  # image i holds the value i; its mask marks a pixel when marked(i)
        images = np.arange(40, dtype=np.float32)[:, None, None, None] * np.ones((1, 4, 4, 3), np.float32)
        masks = np.zeros((40, 4, 4, 1), np.float32)
        masks[[i for i in range(40) if marked(i)], 1, 1, 0] = 1
        return [(_Tensor(images[s:s + 8]), _Tensor(masks[s:s + 8])) for s in range(0, 40, 8)]

    first = lambda picked: [int(image[0, 0, 0]) for image in picked[0]]  # noqa: E731
    assert first(sample_batch(None, 4, val=batches(lambda i: i >= 3))) == [3, 4, 5, 0]
    assert first(sample_batch(None, 4, val=batches(lambda i: i in (9, 20)))) == [9, 20, 0, 1]
    assert first(sample_batch(None, 4, val=batches(lambda i: True))) == [0, 1, 2, 3]
    assert first(sample_batch(None, 2, val=batches(lambda i: i == 30))) == [0, 1]  # past the first 2 x SAMPLE_POOL
    assert SAMPLE_POOL * 2 <= 30
    images, masks = sample_batch(None, 4, val=batches(lambda i: i >= 3))
    assert images.shape == (4, 4, 4, 3) and masks.shape == (4, 4, 4, 1)


def test_quality_vs_cost_names_points_on_the_right_to_their_left_inside_the_axes():
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_quality_vs_cost

    summary = pd.DataFrame({"model": ["linknet-resnet18-lr1e-3", "unet-resnet34-lr1e-3"], "params": [11.5e6, 24.4e6], "test_iou": [0.36, 0.47]})
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_quality_vs_cost(ax, summary, "params", "test_iou")
    assert {text.get_text(): text.get_ha() for text in ax.texts} == {"linknet-resnet18-lr1e-3": "left", "unet-resnet34-lr1e-3": "right"}
    plt.close(fig)


def test_quality_vs_cost_draws_each_models_interval_and_says_what_it_covers():
    """A Pareto front through values 0.003 apart, with intervals of +-0.04 left undrawn, read as a
    verdict the ranking does not make."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_quality_vs_cost

    summary = pd.DataFrame({"model": ["fcn", "unet"], "latency_ms": [1.2, 1.9], "test_iou": [0.161, 0.164], "test_iou_low": [0.12, 0.12],
                            "test_iou_high": [0.20, 0.21], "interval_covers": ["training seeds and test images"] * 2})
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_quality_vs_cost(ax, summary, "latency_ms", "test_iou")
    drawn = [container for container in ax.containers if type(container).__name__ == "ErrorbarContainer"]
    assert len(drawn) == 2 and ax.get_ylim()[0] < 0.12 and ax.get_ylim()[1] > 0.21
    assert ax.get_title() == "test_iou vs latency_ms (dashed: the Pareto front)\nbars: 95% interval of training seeds and test images"
    assert ax.get_legend() is None  # a legend box covered the top model's bar
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_quality_vs_cost(ax, summary.drop(columns=["test_iou_low", "test_iou_high"]), "latency_ms", "test_iou")
    assert not ax.containers and "bars" not in ax.get_title()  # no interval, no bars
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))  # fcn cheaper and better: a front of one point, no dash drawn
    plot_quality_vs_cost(ax, summary.assign(test_iou=[0.2, 0.1]), "latency_ms", "test_iou")
    assert not [l for l in ax.lines if l.get_linestyle() == "--"] and ax.get_title().startswith("test_iou vs latency_ms (the Pareto front: fcn alone, none cheaper or better)\nbars")
    plt.close(fig)


def test_quality_vs_cost_says_which_gains_along_the_front_the_ranking_does_not_support():
    """A dashed front from 0.007 to 0.240 test IoU, through a model whose seeds scored 0.19, 0 and
    0 (mine16 [0.00, 0.33]), read as a ladder of better models: no step of it was supported."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_quality_vs_cost

    summary = pd.DataFrame({"model": ["unet", "mine16", "mine8"], "params": [15025, 2785, 817], "test_iou": [0.240, 0.062, 0.007],
                            "indistinguishable_from": ["mine8, mine16", "mine8, unet", "mine16, unet"]})
    titles = []
    for peers in (summary["indistinguishable_from"], ["mine16", "unet", None], ["", "", None]):
        fig, ax = plt.subplots(figsize=(6, 4))
        plot_quality_vs_cost(ax, summary.assign(indistinguishable_from=peers), "params", "test_iou")
        titles.append(ax.get_title())
        plt.close(fig)
    assert titles[0].endswith("(dashed: the Pareto front)\n2 of 2 gains along it not supported: a costlier model there may be no better")
    assert titles[1].endswith("\n1 of 2 gains along it not supported: a costlier model there may be no better")  # mine8 -> mine16 is
    assert titles[2] == "test_iou vs params (dashed: the Pareto front)"  # every gain supported: nothing to add
    for two in (summary.iloc[:2], summary.iloc[:2].assign(indistinguishable_from="", status=["ok", "dropped (3/3)"])):  # dropped: never compared
        fig, ax = plt.subplots(figsize=(6, 4))
        plot_quality_vs_cost(ax, two, "params", "test_iou")
        assert ax.get_title().endswith("\nits gain not supported: the costlier model may be no better")
        plt.close(fig)


def test_quality_vs_cost_on_linear_axes_names_the_leftmost_points_to_their_right():
    # backbones.yaml: latency 18.5-25.2 ms; the names were placed as if the axis ran from 0 to 1
    # (matplotlib's limits before it settles them), every one to the left, out of the axes.
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_quality_vs_cost

    summary = pd.DataFrame({"model": ["mobilenetv2", "resnet18", "efficientnetb0"], "latency_ms": [18.5, 20.2, 25.2], "test_iou": [0.0, 0.24, 0.04]})
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_quality_vs_cost(ax, summary, "latency_ms", "test_iou")
    assert {text.get_text(): text.get_ha() for text in ax.texts} == {"mobilenetv2": "left", "resnet18": "left", "efficientnetb0": "right"}
    plt.close(fig)


def test_models_at_nearly_the_same_point_are_named_once_together():
    # benchmark.yaml: unet-lr3e-3 and unet-lr3e-4 at the same serving latency (one network,
    # measured once) and test IoU 0.7227 and 0.7207: their names were drawn over each other.
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_quality_vs_cost

    summary = pd.DataFrame({"model": ["linknet-lr3e-3", "unet-lr3e-3", "unet-lr3e-4", "linknet-lr3e-4"],
                            "latency_ms": [14.7, 18.1, 18.1, 14.7], "test_iou": [0.7391, 0.7227, 0.7207, 0.5881]})
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_quality_vs_cost(ax, summary, "latency_ms", "test_iou")
    assert sorted(text.get_text() for text in ax.texts) == ["linknet-lr3e-3", "linknet-lr3e-4", "unet-lr3e-3, unet-lr3e-4"]
    (together,) = [text for text in ax.texts if "," in text.get_text()]
    assert together.xy == (18.1, 0.7227)  # at the higher of the two
    plt.close(fig)


def test_params_within_a_decade_are_labelled_beside_the_points():
    # Encoders of 8.0-14.4M params: a log axis labelled 8M 9M 10M and nothing right of 10M.
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_quality_vs_cost

    summary = pd.DataFrame({"model": ["a", "b", "c", "d"], "params": [8.0e6, 10.1e6, 14.3e6, 14.4e6], "test_iou": [0.0, 0.04, 0.24, 0.32]})
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_quality_vs_cost(ax, summary, "params", "test_iou")
    fig.canvas.draw()
    low, high = ax.get_xlim()
    shown = {t.get_position()[0]: t.get_text() for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high}
    plt.close(fig)
    assert ax.get_xscale() == "linear" and max(shown) >= 13e6 and min(shown) <= 9e6, shown
    assert all(text.endswith("M") for text in shown.values()), shown


def test_loss_curves_over_seeds_say_what_the_lines_and_the_band_are():
    import matplotlib.pyplot as plt
    import pandas as pd

    from harness.outputs.plots import plot_loss_curves, plot_val_metric

    rows = [(step, f"unet@{r}", "train", "loss", 1.0 / step + r) for step in (1, 2, 3) for r in (1, 2, 3)]
    losses = pd.DataFrame(rows, columns=["step", "model", "split", "metric", "value"])
    fig, ax = plt.subplots()
    plot_loss_curves(ax, losses, compared_on="bce+dice")
    assert ax.get_title().endswith("\nfaint: mean of 3 training seeds, solid: smoothed, shaded: their range")
    ax.clear()
    plot_loss_curves(ax, losses[losses["model"] == "unet@1"].assign(model="unet"), compared_on="bce+dice")
    assert ax.get_title() == "training loss: bce+dice (same batches for every model)"
    ax.clear()
    plot_val_metric(ax, losses.assign(split="val", metric="iou", epoch=losses["step"]), "iou")
    assert ax.get_title() == "validation iou\nmean of 3 training seeds, shaded: their range"
    plt.close(fig)


def test_samples_of_autoencoders_alone_show_no_mask_their_target_is_the_image():
    import matplotlib.pyplot as plt
    import numpy as np

    from harness.outputs.plots import plot_samples

    images, masks = np.full((2, 8, 8, 3), 0.5), np.zeros((2, 8, 8, 1))
    masks[:, 0, 0, 0] = -1.0  # an ignored pixel: no word of it when no mask is shown
    alone = plot_samples(images, masks, {"small": images * 0.9, "wide": images}, reconstructions=frozenset({"small", "wide"}))
    assert [ax.get_title() for ax in alone.axes[:3]] == ["image", "small", "wide"] and len(alone.axes) == 6
    assert "ignore_label" not in alone._suptitle.get_text()
    mixed = plot_samples(images, masks, {"small": images, "unet": np.full((2, 8, 8, 1), 0.9)}, reconstructions=frozenset({"small"}))
    assert [ax.get_title() for ax in mixed.axes[:4]] == ["image", "truth", "small", "unet"]
    # Three classes and RGB images: an autoencoder's 3 channels were drawn as a class map.
    three = np.eye(3)[np.zeros((2, 8, 8), int)]
    rgb = plot_samples(images, three, {"small": images * 0.9, "unet": three}, reconstructions=frozenset({"small"}))
    drawn = rgb.axes[2].get_images()[0]
    assert drawn.get_array().shape == (8, 8, 3) and np.allclose(drawn.get_array(), 0.45), "the reconstruction as an image"
    assert rgb.axes[3].get_images()[0].get_array().shape == (8, 8), "the segmentation as a class map"
    plt.close("all")
