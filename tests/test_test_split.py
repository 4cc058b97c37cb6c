"""A held-out test split: every source can have one, nothing that chooses ever sees it, and a run
scores each member's chosen weights on it once, at the end, and ranks by it."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import tiny_config
from pictures import data_config, picture, write_folder

from harness.api import run
from harness.config.loading import validate_config
from harness.data.resolve import resolve_data
from harness.data.splits import split_of
from harness.data.sources import Item
from harness.errors import ConfigError, DataError
from harness.rundir import RunDir, read_csv


@pytest.fixture(scope="module")
def tested_run(tmp_path_factory):
    raw = tiny_config(train={"epochs": 3}, data={"test_size": 8})
    return run(validate_config(raw), results_dir=tmp_path_factory.mktemp("tested"))


@pytest.mark.slow
def test_the_chosen_weights_are_scored_once_on_test_and_the_ranking_uses_test(tested_run):
    run_dir, summary = tested_run.run_dir, tested_run.summary
    scores = tested_run.test_scores  # the API's reading of test_scores.csv
    assert scores.equals(read_csv(run_dir / "test_scores.csv"))
    assert len(scores) == 3 * 8 and set(scores["model"]) == {"fcn", "unet", "deconv"}
    selected = json.loads((run_dir / "run.json").read_text())["test"]["members"]
    for name in ("fcn", "unet", "deconv"):
        best = json.loads((run_dir / "models" / name / "best.json").read_text())
        assert selected[name] == {"weights": "best", "step": best["step"]}
        assert (scores[scores["model"] == name]["step"] == best["step"]).all()
    assert summary["rank"].tolist() == [1, 2, 3] and summary["test_iou"].is_monotonic_decreasing
    assert ((summary["test_iou_low"] <= summary["test_iou"] + 1e-9) & (summary["test_iou"] <= summary["test_iou_high"] + 1e-9)).all()
    assert {"selected_val_iou", "selected_step", "val_iou"} <= set(summary.columns)
    pairs = read_csv(run_dir / "pairs.csv")
    assert set(pairs["metric"]) == {"test_iou"} and pairs["covers"].str.startswith("test images only").all()
    report = (run_dir / "report.html").read_text()
    assert "held-out test split" in report and "What choosing added" in report


@pytest.mark.slow
def test_report_without_the_test_scores_a_run_wrote_rewrites_nothing(tested_run, tmp_path):
    """A deleted test_scores.csv rebuilt summary.csv without its test columns and printed a
    ranking "by test_iou" with no ranks; now the report is refused and every file kept."""
    import shutil

    from conftest import run_main

    copy = tmp_path / "tiny" / tested_run.run_dir.name
    shutil.copytree(tested_run.run_dir, copy)
    (copy / "test_scores.csv").unlink()
    summary = (copy / "summary.csv").read_bytes()
    refused = run_main("report", copy)
    assert refused.returncode == 2 and "test_scores.csv: every test image's scores" in refused.stderr, refused.stderr
    assert (copy / "summary.csv").read_bytes() == summary


@pytest.mark.slow
def test_a_run_stopped_before_scoring_its_test_split_ranks_on_validation_until_it_does(tested_run, tmp_path):
    """The test split is scored at the end: `harness report` of an interrupted run ranked it "by
    test_iou" with no ranks, said its test split had scored each model's final weights, called every
    model trained to its end, and `harness runs` named the summary's first model the best. It ranks on
    validation now (intervals and pairs on val_iou) and says the test split comes at the end."""
    import shutil

    from conftest import run_main

    copy = tmp_path / "tiny" / tested_run.run_dir.name
    shutil.copytree(tested_run.run_dir, copy)
    (copy / "test_scores.csv").unlink()
    info = json.loads((copy / "run.json").read_text())
    del info["test"]
    info.update(status="interrupted", interrupted_by="SIGINT", steps_done=info["total_steps"] - 4)
    (copy / "run.json").write_text(json.dumps(info))
    reported = run_main("report", copy)
    assert reported.returncode == 0, reported.stderr
    summary = read_csv(copy / "summary.csv")
    assert "test_iou" not in summary and summary["rank"].tolist() == [1, 2, 3] and summary["val_iou"].is_monotonic_decreasing
    assert summary["val_iou_low"].notna().all() and set(read_csv(copy / "pairs.csv")["metric"]) == {"val_iou"}
    said = " ".join(reported.stdout.split())
    assert "ranked by val_iou, best first (" in said and "trained to its end" not in said
    assert "The held-out test split is scored when the run completes, and the ranking is on it then" in said
    assert "The held-out test split is scored when the run completes" in (copy / "report.html").read_text()
    listed = json.loads(run_main("runs", "--results", tmp_path, "--json").stdout)
    assert [(r["best"], r["ranked_by"]) for r in listed] == [(summary["model"][0], "val_iou")]


@pytest.mark.slow
def test_test_scores_are_the_best_weights_evaluated_on_images_training_never_saw(tested_run):
    from harness.core.backend import import_keras
    from harness.data.pipeline import build_datasets

    config = tested_run.config
    datasets = build_datasets(config.data, config.training_seeds(), 0, 1)
    images, masks = zip(*[(i.numpy(), m.numpy()) for i, m in datasets.test])
    images, masks = np.concatenate(images), np.concatenate(masks)
    val_images = np.concatenate([i.numpy() for i, _ in datasets.val])
    assert not any(np.array_equal(t, v) for t in images for v in val_images)  # a split of its own
    # The best weights read back from disk (a step before the last) or, best at the last step,
    # the weights in memory: each scored like a fresh load of best.keras.
    steps = {name: json.loads((tested_run.run_dir / "models" / name / "best.json").read_text())["step"] for name in ("fcn", "unet", "deconv")}
    assert min(steps.values()) < tested_run.info["steps_done"] == max(steps.values()), steps
    for name in steps:
        best = import_keras().models.load_model(tested_run.run_dir / "models" / name / "best.keras", compile=False)
        predicted = best.predict(images, verbose=0) > 0.5
        truth = masks > 0.5
        iou = (predicted & truth).sum() / max((predicted | truth).sum(), 1)
        row = tested_run.summary.set_index("model").loc[name]
        assert row["test_iou"] == pytest.approx(float(iou), abs=1e-6), name


@pytest.mark.slow
def test_report_draws_samples_with_the_weights_the_test_split_scored(tested_run):
    """samples.png showed the end-of-run weights beside a ranking of the chosen ones: on
    backbones.yaml a model at test IoU 0.0000 was pictured finding shapes in every image."""
    from harness.config.loading import load_config
    from harness.outputs.derived import load_exported_model, samples_from_exports

    run_dir = tested_run.run_dir
    config = load_config(run_dir / "config.yaml", {"output.plot_formats": ["png"]})  # the tiny run drew no plots
    images, _, predictors = samples_from_exports(RunDir(run_dir), config)
    steps = {name: json.loads((run_dir / "models" / name / "best.json").read_text())["step"] for name in predictors}
    earlier = [name for name, step in steps.items() if step < tested_run.info["steps_done"]]
    assert earlier, steps
    for name in earlier:
        drawn = predictors[name](images)
        best, final = (load_exported_model(run_dir / "models" / name / f) for f in ("best.keras", "model.keras"))
        assert np.array_equal(drawn, best(images, training=False).numpy())
        assert not np.array_equal(drawn, final(images, training=False).numpy())


@pytest.mark.slow
def test_the_runs_samples_are_predicted_with_the_weights_the_test_split_scored(tmp_path, monkeypatch):
    from harness.outputs import derived

    drawn = {}
    original = derived._draw

    def keep_samples(job, *args):
        if job.stem == "samples":
            drawn["images"], _, drawn["predictions"], drawn["title"], _ = job.args  # the last: which are reconstructions
        return original(job, *args)

    monkeypatch.setattr(derived, "_draw", keep_samples)
    raw = tiny_config(train={"epochs": 3}, data={"test_size": 8}, output={"plot_formats": ["png"], "sample_images": 2})
    result = run(validate_config(raw), results_dir=tmp_path)
    run_dir = result.run_dir
    steps = {name: json.loads((run_dir / "models" / name / "best.json").read_text())["step"] for name in ("fcn", "unet", "deconv")}
    earlier = [name for name, step in steps.items() if step < result.info["steps_done"]]
    assert earlier, steps
    assert drawn["title"].endswith("\nwith the weights chosen on validation, which the test split scored")
    for name in earlier:
        best, final = (derived.load_exported_model(run_dir / "models" / name / f) for f in ("best.keras", "model.keras"))
        assert np.array_equal(drawn["predictions"][name], best(drawn["images"], training=False).numpy()), name
        assert not np.array_equal(drawn["predictions"][name], final(drawn["images"], training=False).numpy()), name


@pytest.mark.slow
def test_final_weights_when_asked_and_no_test_split_says_scores_are_on_the_choosing_images(tmp_path):
    # A member that stopped early holds the weights of the step it stopped at, not the run's last.
    stopping = {"epochs": 4, "early_stopping": {"metric": "val_iou", "patience": 1}}
    final = run(validate_config(tiny_config(train=stopping, data={"test_size": 4}, output={"select_by": "final"})), results_dir=tmp_path / "f")
    models, end = final.info["models"], final.info["steps_done"]
    last = {name: end if m["status"] == "ok" else m["changed_at_step"] for name, m in models.items()}
    assert min(last.values()) < end, models
    assert final.info["test"]["members"] == {name: {"weights": "final", "step": step} for name, step in last.items()}
    assert final.test_scores.groupby("model")["step"].max().to_dict() == last
    assert final.summary["selected_val_iou"].notna().all()  # what choosing saw, at that step
    report = (final.run_dir / "report.html").read_text()  # not said to be weights chosen on validation
    assert "weights at the end of its training (not its best on validation)" in report and "What choosing added" not in report
    plain = run(validate_config(tiny_config(train={"epochs": 1})), results_dir=tmp_path / "p")
    assert not (plain.run_dir / "test_scores.csv").exists() and "test_iou" not in plain.summary
    assert plain.test_scores.empty and plain.summary_members.empty  # no test split, no repeats
    assert "No test split" in (plain.run_dir / "report.html").read_text()


def test_the_test_split_by_hash_never_moves_files_between_splits():
    items = [Item(f"images/ex{i:03d}.png", None, None) for i in range(400)]
    before = {i.name: split_of(i, 0.2) for i in items}
    after = {i.name: split_of(i, 0.2, 0.1) for i in items}
    moved = {n for n in before if before[n] != after[n]}
    assert all(after[n] == "test" for n in moved), "only moves into test"
    assert 20 < sum(v == "test" for v in after.values()) < 60
    more = items + [Item(f"images/new{i:03d}.png", None, None) for i in range(100)]
    assert all(split_of(i, 0.2, 0.1) == after[i.name] for i in more[:400]), "adding files moves none"


def test_every_real_source_gives_a_test_split(tmp_path):
    images, masks = write_folder(tmp_path / "a", 30)
    by_fraction, scan = resolve_data(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.2, "test_fraction": 0.25}))
    assert scan.test_size > 0 and by_fraction.data.test_size == scan.test_size
    assert scan.train_size + scan.val_size + scan.test_size == 30 and len(scan.images) == 30

    test_images, test_masks = write_folder(tmp_path / "t", 4)
    folders, scan = resolve_data(data_config({"source": "folder", "images": str(images), "masks": str(masks), "test_images": str(test_images), "test_masks": str(test_masks)}))
    assert scan.test_size == 4

    manifest = tmp_path / "m.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mask", "split"])
        for i in range(12):
            writer.writerow([f"a/images/ex{i:02d}.png", f"a/masks/ex{i:02d}.png", ("train", "train", "val", "test")[i % 4]])
    _, scan = resolve_data(data_config({"source": "csv", "manifest": str(manifest)}))
    assert (scan.train_size, scan.val_size, scan.test_size) == (6, 3, 3)

    pictures = [picture(i, (16, 16)) for i in range(10)]
    arrays = tmp_path / "d.npz"
    np.savez(arrays, images=np.stack([p[0] for p in pictures[:6]]), masks=np.stack([p[1] for p in pictures[:6]]),
             val_images=np.stack([p[0] for p in pictures[6:8]]), val_masks=np.stack([p[1] for p in pictures[6:8]]),
             test_images=np.stack([p[0] for p in pictures[8:]]), test_masks=np.stack([p[1] for p in pictures[8:]]))
    _, scan = resolve_data(data_config({"source": "arrays", "arrays": str(arrays)}))
    assert (scan.train_size, scan.val_size, scan.test_size) == (6, 2, 2)


def test_a_bad_test_file_is_named_like_any_other(tmp_path):
    images, masks = write_folder(tmp_path / "a", 10)
    test_images, test_masks = write_folder(tmp_path / "t", 3)
    (test_images / "ex01.png").write_bytes(b"not a picture")
    with pytest.raises(DataError) as caught:
        resolve_data(data_config({"source": "folder", "images": str(images), "masks": str(masks), "test_images": str(test_images), "test_masks": str(test_masks)}))
    assert str(test_images / "ex01.png") in caught.value.render()
    with pytest.raises(ConfigError):
        validate_config(tiny_config(data={"source": "folder", "images": str(images), "masks": str(masks), "test_images": str(test_images)}))


def test_streamed_from_disk_the_test_split_is_the_same(tmp_path):
    images, masks = write_folder(tmp_path / "a", 24)
    spec = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.25, "test_fraction": 0.25}
    held, in_memory = resolve_data(data_config(spec))
    streamed_config, streamed = resolve_data(data_config({**spec, "cache": "disk"}), cache_dir=tmp_path / "cache")
    assert streamed.test_size == in_memory.test_size > 0
    total = in_memory.train_size + in_memory.val_size + in_memory.test_size
    for index in range(total):
        image, labels = streamed.store.read(index)
        np.testing.assert_array_equal(image, in_memory.images[index])
        np.testing.assert_array_equal(labels, in_memory.labels[index])


def grid_models():
    return [
        {"name": "fcn", "arch": "tiny_fcn", "grid": {"optimizer.learning_rate": [0.001, 0.01]}},
        {"name": "unet", "arch": "tiny_unet", "grid": {"optimizer.learning_rate": [0.001, 0.01]}},
    ]


@pytest.mark.slow
@pytest.mark.parametrize("repeats", [1, 2])
def test_compare_by_chooses_each_groups_best_on_validation_and_compares_the_chosen(tmp_path, repeats):
    raw = tiny_config(models=grid_models(), train={"epochs": 2, "repeats": repeats}, data={"test_size": 8}, output={"compare_by": ["arch"], "plot_formats": ["png"]})
    result = run(validate_config(raw), results_dir=tmp_path)
    summary = result.summary
    assert set(summary["compare_group"]) == {"arch=tiny_fcn", "arch=tiny_unet"}
    for group, members in summary.groupby("compare_group"):
        chosen = members[members["chosen_in_group"]]
        assert len(chosen) == 1 and chosen["selected_val_iou"].iloc[0] == members["selected_val_iou"].max()
    table = result.compare_by
    assert len(table) == 1 and {table["group_a"][0], table["group_b"][0]} == {"arch=tiny_fcn", "arch=tiny_unet"}
    assert table["metric"][0] == "test_iou" and set(table[["model_a", "model_b"]].iloc[0]) == set(summary.loc[summary["chosen_in_group"], "model"])
    if repeats > 1:
        assert table["seeds"][0] == 2 and table["covers"][0] == "training seeds and test images"
    report = (result.run_dir / "report.html").read_text()
    assert "each at its best on validation" in report
    # The tuning budget: with one trial a group expects the mean of what it tried, on validation
    # (what chose) and on test (what the chosen scored); with both trials, the chosen one's test score.
    budget = result.expected_best
    assert sorted(zip(budget["group"], budget["trials"])) == [("arch=tiny_fcn", 1), ("arch=tiny_fcn", 2), ("arch=tiny_unet", 1), ("arch=tiny_unet", 2)]
    for group, members in summary.groupby("compare_group"):
        mine = budget[budget["group"] == group].set_index("trials")
        assert mine.loc[1, "expected_best"] == pytest.approx(members["selected_val_iou"].mean())
        assert mine.loc[1, "expected_reported"] == pytest.approx(members["test_iou"].mean())
        assert mine.loc[2, "expected_best"] >= mine.loc[1, "expected_best"]
    assert (result.run_dir / "plots" / "expected_best.png").exists() and "Tuning budget" in report


def test_compare_by_names_a_setting_of_a_model_entry():
    with pytest.raises(ConfigError) as caught:
        validate_config(tiny_config(output={"compare_by": ["architecture"]}))
    assert "output.compare_by" in caught.value.render() and "arch" in caught.value.render()


def test_a_data_setting_the_source_does_not_read_is_refused_not_ignored(tmp_path):
    with pytest.raises(ConfigError) as caught:  # under synthetic: no test split, without a word
        validate_config(tiny_config(data={"test_fraction": 0.2, "fit": "crop"}))
    text = caught.value.render()
    assert "test_fraction: source synthetic does not read it" in text and "data.test_size" in text and "fit:" in text
    with pytest.raises(ConfigError) as caught:
        validate_config(tiny_config(data={"source": "folder", "images": "i", "masks": "m", "max_shapes": 2, "manifest": "x.csv"}))
    assert "max_shapes: source folder" in caught.value.render() and "manifest: source folder" in caught.value.render()
    resolved = validate_config(tiny_config(data={"max_shapes": 2, "test_size": 8}))  # synthetic's own settings
    assert validate_config(resolved.model_dump(mode="json")) == resolved  # a run's config.yaml, defaults written out
    with pytest.raises(ConfigError) as caught:  # a grid over it would train every member alike
        validate_config(tiny_config(models=[{"name": "a", "arch": "tiny_fcn", "grid": {"optimizer.weight_decay": [1e-4, 1e-3]}}],
                                    train={"optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}}))
    assert "weight_decay: sgd does not read it, only adamw" in caught.value.render() and "member a-wd1e-4" in caught.value.render()
    with pytest.raises(ConfigError) as caught:
        validate_config(tiny_config(train={"optimizer": {"name": "adam", "momentum": 0.9}}))
    assert "momentum: adam does not read it, only sgd, rmsprop (adam takes beta_1)" in caught.value.render()
    validate_config(tiny_config(train={"optimizer": {"name": "adamw", "weight_decay": 0.01, "beta_1": 0.5}}))
    older = tiny_config(data={"test_fraction": 0.2})  # a run started before the check: still read, as it was
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(older), encoding="utf-8")
    assert RunDir(tmp_path).read_config().data.test_fraction == 0.2


def test_tfds_test_split_is_held_out(tmp_path):
    from pictures import write_tfds

    root = write_tfds(tmp_path)
    spec = {"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(root), "val_split": None, "test_split": "test"}, "val_fraction": 0.34}
    resolved, scan = resolve_data(data_config(spec))
    assert scan.test_size == 2 and scan.train_size + scan.val_size == 6 and resolved.data.has_test
    with pytest.raises(ConfigError):
        data_config({**spec, "tfds": {**spec["tfds"], "val_split": "test"}})


def test_a_run_of_several_groups_scores_test_in_each_and_compares_the_chosen_across_them(tmp_path):
    from conftest import only_run_dir, run_cli, write_yaml

    config = tiny_config(models=grid_models(), data={"test_size": 4}, placement={"max_members_per_group": 2},
                         output={"progress": "lines", "compare_by": ["arch"]})
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "r")
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "r")
    info = json.loads((run_dir / "run.json").read_text())
    assert len(info["groups"]) == 2
    # Which weights the test split scored, for the whole run (samples.png and `harness report`
    # picture those): each group's members, as that group recorded them.
    groups = [json.loads(p.read_text())["test"]["members"] for p in sorted(run_dir.glob("groups/*/run.json"))]
    assert info["test"]["members"] == {**groups[0], **groups[1]} and len(info["test"]["members"]) == 4
    scores = read_csv(run_dir / "test_scores.csv")
    assert scores.groupby("model").size().to_dict() == {m: 4 for m in ("fcn-lr0.01", "fcn-lr1e-3", "unet-lr0.01", "unet-lr1e-3")}
    table = read_csv(run_dir / "compare_by.csv")
    assert len(table) == 1 and table["group_a"][0] != table["group_b"][0]
    printed = " ".join(done.stdout.split())  # the terminal wraps lines
    assert "Each group at its best on validation" in printed and " ahead " in printed and "no verdict" in printed


@pytest.mark.slow  # 10-15 s: kept out of the fast tier
def test_the_test_split_is_scored_by_the_runs_eval_function_without_a_new_trace(tmp_path):
    from harness.training.actions import score_test
    from harness.training.entry import run_experiment

    seen = {}

    def score_and_count(done):
        score_test(done)
        seen["traces"] = done.compiled.evaluate.experimental_get_tracing_count()
        seen["scored"] = set(done.book.record.get("test")["members"])
        seen["switched"] = done.compiled.eval_switched

    config = validate_config(tiny_config(train={"epochs": 2}, data={"test_size": 4}))
    run_experiment(config, tmp_path, end_of_run=(score_and_count,))
    # Traced at the first validation only; with no race or early stopping nothing leaves, and the
    # eval function reads no switches (their conds would only lengthen its trace).
    assert seen == {"traces": 1, "scored": {"fcn", "unet", "deconv"}, "switched": False}


def test_what_choosing_added_is_above_zero_when_validation_looked_better_for_a_loss_too():
    """For a loss, validation minus test is below zero when validation looked better: the gap read
    as "choosing added -0.0669" for a model whose chosen weights looked 0.0669 better than on test."""
    from harness.outputs.verdict_text import chosen_on

    scores = pd.DataFrame({"model": ["a"], "selected_val_iou": [0.80], "test_iou": [0.75], "selected_val_loss": [0.40], "test_loss": [0.45]})
    assert "a +0.0500." in chosen_on(scores, "test_iou") and "a +0.0500." in chosen_on(scores, "test_loss")
    worse_on_validation = scores.assign(selected_val_iou=[0.70], selected_val_loss=[0.50])
    assert "a -0.0500." in chosen_on(worse_on_validation, "test_iou") and "a -0.0500." in chosen_on(worse_on_validation, "test_loss")


def test_a_ranking_on_validation_names_what_the_run_chose_with_those_images():
    """Without a test split the words said each model's best weights were chosen on validation,
    also in a run that scored every model's weights at the end of its training and chose nothing."""
    from harness.outputs.verdict_text import chosen_on, validation_choices

    scores = pd.DataFrame({"model": ["a", "b"], "val_iou": [0.8, 0.7], "best_val_loss": [0.3, 0.4]})
    plain = validate_config(tiny_config())
    assert validation_choices(plain, "val_iou") == ()
    said = chosen_on(scores, "val_iou", False, False, validation_choices(plain, "val_iou"))
    assert said.startswith("No test split:") and "best weights" not in said and "this run chose nothing else with them" in said
    raced = validate_config(tiny_config(train={"epochs": 4, "race": {"rungs": [1], "keep": 0.5}}, output={"compare_by": ["arch"]}))
    choices = validation_choices(raced, "best_val_loss")
    assert choices == ("the race's cuts", "each group's pick (output.compare_by)", "each model's best evaluation (best_val_loss)")
    said = chosen_on(scores, "best_val_loss", False, True, choices)
    assert said.startswith("The held-out test split is scored when the run completes") and (
        "chose the race's cuts, each group's pick (output.compare_by) and each model's best evaluation (best_val_loss), and on "
        "which the ranking picks its winner") in said and "chose nothing" not in said


def test_gaps_below_zero_for_every_model_are_said_to_be_the_splits_not_the_choosing():
    """real_images with 3 repeats: unet -0.0898, fcn -0.0723, deconv -0.0732 under "What choosing
    added", though choosing on validation can only flatter validation: its 44 test tiles were
    easier than its 36 validation tiles for every model."""
    from harness.outputs.verdict_text import chosen_on

    easier_test = pd.DataFrame({"model": ["unet", "fcn", "deconv"], "selected_val_iou": [0.7869, 0.7912, 0.7893],
                                "test_iou": [0.8767, 0.8635, 0.8625], "selected_val_loss": [0.60, 0.66, 0.62], "test_loss": [0.61, 0.62, 0.66]})
    said = chosen_on(easier_test, "test_iou")
    assert "unet -0.0898, fcn -0.0723, deconv -0.0732. Every gap is below zero, which choosing cannot cause" in said
    assert "Every gap" not in chosen_on(easier_test, "test_loss")  # on the loss, unet's gap is above zero
    assert "Every gap" not in chosen_on(easier_test.head(1), "test_iou")  # one model: no pattern to read


@pytest.mark.slow
def test_the_api_gives_the_models_the_ranking_scored_beside_the_end_of_run_ones(tested_run):
    from harness.api import load_run
    from harness.core.backend import import_keras

    keras = import_keras()
    for result in (tested_run, load_run(tested_run.run_dir)):
        for name in ("fcn", "unet", "deconv"):
            best = keras.models.load_model(tested_run.run_dir / "models" / name / "best.keras", compile=False)
            scored = result.scored_models[name].get_weights()
            assert all(np.array_equal(a, b) for a, b in zip(scored, best.get_weights())), name
    # the weights chosen on validation are not the end-of-run ones, or this would test nothing
    last = json.loads((tested_run.run_dir / "run.json").read_text())["steps_done"]
    differ = [n for n in ("fcn", "unet", "deconv") if json.loads((tested_run.run_dir / "models" / n / "best.json").read_text())["step"] < last]
    assert differ
    name = differ[0]
    final = tested_run.models[name].get_weights()
    assert not all(np.array_equal(a, b) for a, b in zip(final, tested_run.scored_models[name].get_weights()))


@pytest.mark.slow  # two short runs' worth: 10 s
@pytest.mark.parametrize("damaged_file", ["best.keras", "best.json"])
def test_a_damaged_best_file_is_named_and_removed_the_final_weights_are_scored_and_said_to_be(tmp_path, damaged_file):
    from harness.training.actions import END_OF_RUN, score_test
    from harness.training.entry import resume_run, run_experiment

    damaged = []

    def damage(done):  # a chosen state other than the last: the one score_test must read from disk
        steps = {m.name: json.loads((done.run.path / "models" / m.name / "best.json").read_text())["step"] for m in done.members}
        name = next(name for name, step in steps.items() if step < int(done.global_step.numpy()))
        (done.run.path / "models" / name / damaged_file).write_bytes(b"not a zip file")
        damaged.append(name)

    at = END_OF_RUN.index(score_test)
    config = validate_config(tiny_config(train={"epochs": 3}, data={"test_size": 8}))
    with pytest.raises(ConfigError) as raised:
        run_experiment(config, tmp_path, end_of_run=(*END_OF_RUN[:at], damage, *END_OF_RUN[at:]))
    (name,) = damaged
    (run_dir,) = (tmp_path / "tiny").iterdir()
    said = raised.value.render()
    reason = "BadZipFile" if damaged_file == "best.keras" else "JSONDecodeError"
    assert f"{run_dir / 'models' / name / damaged_file} cannot be read ({reason}" in said and f"harness resume {run_dir}" in said
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    for chosen in ("best.keras", "best.json"):
        (run_dir / "models" / name / chosen).unlink()
    resumed = resume_run(run_dir)
    scored = resumed.info["test"]["members"]
    assert scored[name]["weights"] == "final" and scored[name]["step"] == resumed.info["steps_done"] and "removed" in scored[name]["note"]
    assert all(scored[other]["weights"] == "best" for other in scored if other != name)
