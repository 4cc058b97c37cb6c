"""Expected best score against the tuning budget: the closed form checked against every set of k
trials (its mean) and every sequence of k draws (its spread), and the table, the leaders and the
sentence the report prints."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from harness.outputs.tuning_budget import budget_table, describe_leaders, expected_best_of_k, expected_score_of_chosen, leaders
from harness.rundir import read_csv

VAL = [0.61, 0.70, 0.55, 0.70, 0.64]  # a tie at the top: the earlier trial is the one chosen
TEST = [0.60, 0.66, 0.58, 0.71, 0.62]


def every_draw(n: int, k: int):
    return itertools.product(range(n), repeat=k)  # n^k equally likely sequences, with replacement


def every_set(n: int, k: int):
    return itertools.combinations(range(n), k)  # C(n, k) equally likely sets, without replacement


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("higher", [True, False])
def test_expected_best_is_the_mean_over_every_set_of_k_trials_and_its_spread_over_every_sequence_of_draws(k, higher):
    pick = max if higher else min
    over_sets = np.array([pick(VAL[i] for i in chosen) for chosen in every_set(len(VAL), k)])
    over_draws = np.array([pick(VAL[i] for i in draw) for draw in every_draw(len(VAL), k)])
    mean, std = expected_best_of_k(VAL, k, higher)
    assert mean == pytest.approx(over_sets.mean(), abs=1e-12) and std == pytest.approx(over_draws.std(), abs=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("higher", [True, False])
def test_the_chosen_ones_score_is_averaged_over_every_set_with_ties_to_the_earlier_trial(k, higher):
    def chosen(draw):
        key = (lambda i: (VAL[i], -i)) if higher else (lambda i: (-VAL[i], -i))
        return max(draw, key=key)

    over_sets = np.array([TEST[chosen(trials)] for trials in every_set(len(VAL), k)])
    over_draws = np.array([TEST[chosen(draw)] for draw in every_draw(len(VAL), k)])
    mean, std = expected_score_of_chosen(VAL, TEST, k, higher)
    assert mean == pytest.approx(over_sets.mean(), abs=1e-12) and std == pytest.approx(over_draws.std(), abs=1e-12)


def test_one_trial_expects_the_mean_and_all_of_them_the_best_the_choice_takes():
    # Drawn with replacement (Dodge et al.'s form) the best of all five would expect 0.682, below
    # the best trial run: the bias Tang et al. (2020) pointed out.
    assert expected_best_of_k(VAL, 1)[0] == pytest.approx(np.mean(VAL))
    assert expected_best_of_k(VAL, 5)[0] == max(VAL) and expected_best_of_k(VAL, 200)[0] == max(VAL)
    assert expected_best_of_k(VAL, 5, higher=False)[0] == min(VAL)
    assert expected_score_of_chosen(VAL, TEST, 5) == (pytest.approx(TEST[1]), pytest.approx(expected_score_of_chosen(VAL, TEST, 5)[1]))


def candidates(test: bool = False) -> pd.DataFrame:
    # wide: one great and one poor learning rate; narrow: two good ones. Narrow wins a budget of
    # one (0.71 against 0.675), wide a budget of two (0.95 against 0.72).
    frame = pd.DataFrame({"group": ["arch=wide", "arch=wide", "arch=narrow", "arch=narrow"],
                          "model": ["w1", "w2", "n1", "n2"], "val_iou": [0.40, 0.95, 0.70, 0.72]})
    if test:
        frame["test_iou"] = [0.42, 0.60, 0.69, 0.74]
    return frame


def test_the_table_has_a_row_per_group_and_budget_and_the_leader_changes_with_the_budget():
    table = budget_table(candidates(), "val_iou", None)
    assert list(zip(table["group"], table["trials"])) == [("arch=wide", 1), ("arch=wide", 2), ("arch=narrow", 1), ("arch=narrow", 2)]
    assert table["expected_best"].tolist() == pytest.approx([0.675, 0.95, 0.71, 0.72])
    assert "expected_reported" not in table
    assert leaders(table) == [(1, "arch=narrow", pytest.approx(0.035)), (2, "arch=wide", pytest.approx(0.23))]
    assert describe_leaders(table) == ("Which group is ahead depends on the tuning budget (by expected best validation score): "
                                       "arch=narrow at 1 trial (by 0.0350 over the next), then arch=wide at 2 trials (by 0.2300 over "
                                       "the next). These are expectations over the trials run, with no interval; the spread of each "
                                       "(±) is 0.0087-0.2750, so a smaller margin is no verdict.")


def test_with_a_test_split_the_leader_is_by_the_test_score_of_what_validation_chose():
    table = budget_table(candidates(test=True), "val_iou", "test_iou")
    # wide's better validation model is the worse one on test: both its trials choose w2, 0.60 on test.
    assert table["expected_reported"].tolist() == pytest.approx([0.51, 0.60, 0.715, 0.74])
    assert [(k, group) for k, group, _ in leaders(table)] == [(1, "arch=narrow"), (2, "arch=narrow")]
    assert describe_leaders(table).startswith("By expected test score of the model chosen on validation, arch=narrow is ahead "
                                              "at every budget from 1 to 2 trials (by 0.1400-0.2050 over the next).")


def test_the_budget_plot_says_what_its_bands_are():
    import matplotlib.pyplot as plt

    from harness.outputs.plots import plot_expected_best

    fig = plot_expected_best(budget_table(candidates(test=True), "val_iou", "test_iou"))
    assert all(ax.get_title().endswith("\nshaded: one standard deviation of the best of that many trials either way") for ax in fig.axes)
    plt.close(fig)


def test_a_group_none_of_whose_trials_finished_is_never_called_ahead():
    # a race dropped both of wide's trials: its curve (the best of what it dropped) stays in the
    # table, but a search whose choice takes none of its models is not ahead of one that finished
    frame = candidates().assign(finished=[False, False, True, True])
    table = budget_table(frame, "val_iou", None)
    assert set(table["group"]) == {"arch=wide", "arch=narrow"}
    assert leaders(table) == [] and describe_leaders(table) == ""
    assert leaders(budget_table(candidates().assign(finished=[False, True, True, True]), "val_iou", None))[1][1] == "arch=wide"


def test_a_loss_is_best_low_and_a_group_of_one_has_no_one_to_lead():
    frame = candidates().rename(columns={"val_iou": "val_loss"})
    table = budget_table(frame, "val_loss", None)
    assert table["expected_best"].tolist() == pytest.approx([0.675, 0.40, 0.71, 0.70])
    first = budget_table(frame[frame["model"].isin(["w1", "n1"])], "val_loss", None)
    assert describe_leaders(first).startswith("By expected best validation score, arch=wide is ahead at 1 trial (by 0.3000 over the next).")
    alone = budget_table(frame[frame["group"] == "arch=wide"], "val_loss", None)
    assert leaders(alone) == [] and describe_leaders(alone) == ""
    assert budget_table(frame.iloc[0:0], "val_loss", None).empty


def test_a_run_without_a_test_split_writes_the_validation_curve_its_plot_and_report_table(tmp_path):
    from conftest import tiny_config

    from harness.config.loading import validate_config
    from harness.outputs.tasks import write_tuning_budget
    from harness.outputs.report import render_budget
    from harness.rundir import RunDir

    models = [{"name": "fcn", "arch": "tiny_fcn", "grid": {"optimizer.learning_rate": [0.001, 0.01, 0.1]}},
              {"name": "unet", "arch": "tiny_unet", "grid": {"optimizer.learning_rate": [0.001, 0.01]}}]
    config = validate_config(tiny_config(models=models, output={"compare_by": ["arch"], "plot_formats": ["png"]}))
    summary = pd.DataFrame({"model": ["fcn-lr1e-3", "fcn-lr0.01", "fcn-lr0.1", "unet-lr1e-3", "unet-lr0.01"],
                            "status": ["ok", "ok", "diverged", "ok", "ok"], "val_iou": [0.5, 0.9, 0.1, 0.72, 0.74]})
    run = RunDir(tmp_path)
    run.plots.mkdir(parents=True, exist_ok=True)
    table = write_tuning_budget(run, config, summary, config.ranking_column())
    # The diverged member is a trial, ranked below the two that finished: worst to best 0.1, 0.5, 0.9.
    assert table[["group", "trials", "candidates", "unfinished"]].values.tolist() == [
        ["arch=tiny_fcn", 1, 3, 1], ["arch=tiny_fcn", 2, 3, 1], ["arch=tiny_fcn", 3, 3, 1], ["arch=tiny_unet", 1, 2, 0], ["arch=tiny_unet", 2, 2, 0]]
    # Two of the three: {0.1, 0.5} takes 0.5, the other two sets 0.9. All three: 0.9, the per-group choice.
    assert table["expected_best"].tolist() == pytest.approx([0.5, (0.5 + 0.9 + 0.9) / 3, 0.9, 0.73, 0.74])
    assert read_csv(tmp_path / "expected_best.csv")["chosen_by"].eq("val_iou").all()
    assert (run.plots / "expected_best.png").stat().st_size > 0
    unplotted = RunDir(tmp_path / "unplotted")  # `plot_formats: []`: the table, no plot
    unplotted.path.mkdir()
    write_tuning_budget(unplotted, config.model_copy(update={"output": config.output.model_copy(update={"plot_formats": []})}), summary, config.ranking_column())
    assert (unplotted.path / "expected_best.csv").exists() and not (unplotted.plots / "expected_best.png").exists()
    page = render_budget(table)
    assert "0.7300 ± 0.0100" in page
    assert "arch=tiny_unet at 1 trial (by 0.2300 over the next), then arch=tiny_fcn at 2 trials (by 0.0267 over the next)" in page


def test_the_terminal_names_each_groups_choice_and_the_leaders(tmp_path):
    from harness.outputs.printed import per_group_lines

    summary = pd.DataFrame({"model": ["w2", "n2", "w1"], "compare_group": ["arch=wide", "arch=narrow", "arch=wide"],
                            "chosen_in_group": [True, True, False]})
    assert per_group_lines(summary.drop(columns="chosen_in_group"), tmp_path) == ""
    assert per_group_lines(summary, tmp_path) == "Each group at its best on validation (compare_by.csv; the report's Per group section): arch=wide: w2, arch=narrow: n2."
    budget_table(candidates(), "val_iou", None).to_csv(tmp_path / "expected_best.csv", index=False)
    assert per_group_lines(summary, tmp_path).endswith(describe_leaders(budget_table(candidates(), "val_iou", None)))
    # What the chosen models' pairs support: the question a run with compare_by asks, said at the terminal too.
    pd.DataFrame({"group_a": ["arch=narrow"], "group_b": ["arch=wide"], "model_a": ["n2"], "model_b": ["w2"], "metric": ["test_iou"],
                  "seeds": [3], "diff": [-0.02], "diff_low": [-0.05], "diff_high": [0.01], "covers": ["training seeds and test images"],
                  "seeds_a_better": [1], "seeds_b_better": [2], "supported": [False]}).to_csv(tmp_path / "compare_by.csv", index=False)
    said = per_group_lines(summary, tmp_path, "test_iou")
    assert ("arch=narrow: n2. Between the chosen, on test_iou (intervals cover training seeds and test images; Holm-adjusted "
            "across 1 pair): w2 over n2 (+0.0200 [-0.0100, +0.0500]), better in 2 of 3 seeds: not supported. Which group") in said
    pd.DataFrame({"model_a": ["n2"], "model_b": ["w2"], "metric": ["val_iou"], "diff": [0.03], "diff_low": [0.01], "diff_high": [0.05],
                  "covers": ["validation images only"], "supported": [False], "beyond_image_noise": [True]}).to_csv(tmp_path / "compare_by.csv", index=False)
    assert ("(one training seed: intervals cover validation-image noise only, so none is called supported): n2 over w2 "
            "(+0.0300 [+0.0100, +0.0500]): beyond image noise.") in per_group_lines(summary, tmp_path, "val_iou")
    pd.DataFrame({"model_a": ["n2"], "model_b": ["w2"], "diff": [0.03]}).to_csv(tmp_path / "compare_by.csv", index=False)
    assert "Between" not in per_group_lines(summary, tmp_path, "val_iou")  # a table without `covers`: no sentence, no error


def test_a_trial_that_did_not_finish_ranks_below_every_finished_one_whatever_its_score():
    frame = pd.DataFrame({"group": ["g", "g"], "val_iou": [0.5, 0.9], "test_iou": [0.6, 0.95], "finished": [True, False]})
    table = budget_table(frame, "val_iou", "test_iou")
    # Worst to best: the dropped 0.9, then the finished 0.5; two trials take the finished one.
    assert table["expected_best"].tolist() == pytest.approx([0.7, 0.5])
    assert table["expected_reported"].tolist() == pytest.approx([0.775, 0.6])
    assert table["unfinished"].tolist() == [1, 1]


def test_a_trial_never_scored_counts_as_the_worst_iou_and_is_left_out_of_a_loss():
    frame = pd.DataFrame({"group": ["g", "g"], "val_iou": [0.6, float("nan")], "val_loss": [0.3, float("nan")], "finished": [True, False]})
    assert budget_table(frame, "val_iou", None)["expected_best"].tolist() == pytest.approx([0.3, 0.6])
    assert budget_table(frame, "val_loss", None)["expected_best"].tolist() == pytest.approx([0.3])


def test_a_model_stopped_early_is_a_candidate_of_its_group_and_one_that_diverged_is_not():
    from conftest import tiny_config

    from harness.config.loading import validate_config
    from harness.outputs.verdicts import choose_per_group

    models = [{"name": "fcn", "arch": "tiny_fcn", "grid": {"optimizer.learning_rate": [0.001, 0.01, 0.1]}}]
    config = validate_config(tiny_config(models=models, output={"compare_by": ["arch"]}))
    summary = pd.DataFrame({"model": ["fcn-lr1e-3", "fcn-lr0.01", "fcn-lr0.1"], "status": ["ok", "stopped (2/3)", "diverged"],
                            "val_iou": [0.5, 0.7, 0.9]})
    chosen = choose_per_group(summary, config.models, ["arch"], "val_iou")
    assert chosen[["model", "candidates"]].values.tolist() == [["fcn-lr0.01", 2]]


def test_the_expected_best_is_unbiased_where_drawing_with_replacement_was_low():
    # 20,000 searches of 5 trials each from a normal spread of outcomes, against the true expected
    # best of k (the order statistics' means, from 400,000 searches): docs/comparing.md's simulation.
    from harness.outputs.tuning_budget import best_of_k_weights, spread_weights

    rng = np.random.default_rng(0)
    searches = np.sort(rng.normal(0, 1, (20_000, 5)), axis=1)
    for k in (2, 5):
        truth = rng.normal(0, 1, (400_000, k)).max(axis=1).mean()
        assert (searches @ best_of_k_weights(5, k)).mean() == pytest.approx(truth, abs=0.01)
        assert (searches @ spread_weights(5, k)).mean() < truth - 0.1  # the form with replacement: biased low


def test_the_reports_per_group_verdict_points_to_compare_by_csv_for_the_pairs_it_does_not_name():
    """Four chosen models make six pairs; the sentence names three and sent the reader to pairs.csv,
    whose Holm adjustment is over every pair of the run, not over the chosen ones."""
    from harness.outputs.report import render_group_section

    models = ["a", "b", "c", "d"]
    summary = pd.DataFrame({"model": models, "compare_group": [f"arch={m}" for m in models], "chosen_in_group": [True] * 4,
                            "selected_val_iou": [0.8, 0.7, 0.6, 0.5], "test_iou": [0.8, 0.7, 0.6, 0.5]})
    pairs = pd.DataFrame([{"model_a": a, "model_b": b, "metric": "test_iou", "diff": 0.01 * (i + 1), "diff_low": -0.1, "diff_high": 0.1,
                           "covers": "training seeds and test images", "seeds": 3, "p_t": 0.5, "p_holm": 1.0, "supported": False,
                           "repeats_to_resolve": np.inf} for i, (a, b) in enumerate(itertools.combinations(models, 2))])
    page = render_group_section(summary, pairs, "test_iou")
    assert "and 3 more (compare_by.csv)" in page and "pairs.csv)" not in page.replace("compare_by.csv", "")
