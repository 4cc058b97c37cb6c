"""`harness compare --pairs`: verdicts between models of different runs, paired on the images both
were scored on, and the refusals when they were not (in process; the runs are tiny and real)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml
from conftest import run_main, tiny_config, trains_runs, write_yaml

import harness
from harness.errors import ConfigError
from harness.rundir import read_csv


@pytest.fixture(scope="module")
@trains_runs
def results(tmp_path_factory):
    """Two one-seed runs of the tiny config (seeds 3 and 4) and two runs with 2 repeats each."""
    folder = tmp_path_factory.mktemp("cross")
    grid = [{"name": n, "arch": f"tiny_{n}", "grid": {"optimizer.learning_rate": [0.001, 0.01]}} for n in ("fcn", "unet")]
    by_arch = {"models": grid, "train": {"epochs": 1}, "data": {"test_size": 8}, "output": {**TINY_OUTPUT, "compare_by": ["arch"]}}
    for name, changes in (("one", {}), ("two", {"seed": 4}), ("rep_a", {"train": {"epochs": 1, "repeats": 2}}),
                          ("rep_b", {"seed": 5, "train": {"epochs": 1, "repeats": 2}}), ("grid_a", by_arch), ("grid_b", {**by_arch, "seed": 4})):
        config = tiny_config(**changes)
        config["name"] = name
        assert run_main("run", write_yaml(folder / f"{name}.yaml", config), "--results", folder / "results").returncode == 0
    return folder / "results"


TINY_OUTPUT = tiny_config()["output"]


def run_of(results, name):
    return next((results / name).iterdir())


def copy_of(run_dir, folder, run_id="20261101-000000"):
    """The same trained networks under another run id: a run compared with its own copy."""
    copied = folder / run_dir.parent.name / run_id
    shutil.copytree(run_dir, copied)
    return copied


def test_a_pair_across_runs_gets_the_interval_one_run_would_have_given_it(results, tmp_path):
    one = run_of(results, "one")
    again = copy_of(one, tmp_path)
    found = harness.compare_pairs([one, again])
    pairs = found.pairs
    assert len(pairs) == 9 and set(pairs["run_a"]) == {"one/" + one.name} and set(pairs["run_b"]) == {"one/" + again.name}
    assert found.rank == "val_iou" and not pairs["supported"].any()
    assert set(pairs["covers"]) == {"validation images only (one training seed: training randomness not measured)"}
    same = pairs[pairs["model_a"] == pairs["model_b"]]
    assert (same["diff"] == 0).all() and not same["beyond_image_noise"].any()
    # unet of one run against fcn of the other: the very networks of the run's own pair (unet, fcn).
    own = read_csv(one / "pairs.csv").dropna(subset=["diff_low"])
    own = own[(own["model_a"] == "fcn") & (own["model_b"] == "unet")].iloc[0]
    across = pairs[(pairs["model_a"] == "fcn") & (pairs["model_b"] == "unet")].iloc[0]
    for column in ("diff", "diff_low", "diff_high", "p_a_better"):
        assert across[column] == pytest.approx(own[column], abs=1e-12), column


def test_a_run_stopped_before_its_end_is_refused_even_with_a_summary_report_wrote(results, tmp_path):
    # `harness report` of an interrupted run writes its summary.csv: pairs would have taken the
    # scores of step 4 of 100 for final ones.
    one = run_of(results, "one")
    stopped = copy_of(one, tmp_path)
    info = json.loads((stopped / "run.json").read_text())
    (stopped / "run.json").write_text(json.dumps({**info, "status": "interrupted", "steps_done": 4, "total_steps": 100}))
    with pytest.raises(ConfigError, match=r"interrupted at step 4/100 \(its summary.csv is of then\); pairs across runs need each model's "
                                          r"final scores: harness resume .*, then compare again"):
        harness.compare_pairs([one, stopped])
    (stopped / "run.json").write_text(json.dumps({**info, "status": "failed"}))  # failed after its last step (at its end): final scores
    assert len(harness.compare_pairs([one, stopped]).pairs) == 9


def test_pairs_print_a_verdict_in_words_and_save_as_csv(results, tmp_path):
    runs = [run_of(results, "one"), run_of(results, "two")]
    shutil.copytree(runs[1], tmp_path / "one" / runs[1].name)  # `two` under the same experiment name: it differs by seed only
    runs[1] = tmp_path / "one" / runs[1].name
    printed = run_main("compare", *runs, "--pairs", "--pairs-csv", tmp_path / "pairs.csv")
    assert printed.returncode == 0, printed.stderr
    text = " ".join(printed.stdout.split())
    assert "runs: [1] one/" in text and "[2] one/" in text and "the pairs below do" in text
    assert "One training seed: the intervals of val_iou cover validation-image noise only" in text
    assert "fcn [1]" in text and "seed: one/" in text  # the short names, and the settings that differ
    saved = read_csv(tmp_path / "pairs.csv")
    assert len(saved) == 9 and list(saved.columns[:4]) == ["run_a", "model_a", "run_b", "model_b"]
    as_json = json.loads(run_main("compare", *runs, "--pairs", "--json").stdout)
    assert len(as_json["models"]) == 6 and len(as_json["pairs"]) == 9 and as_json["notes"] == []


def test_runs_with_repeats_are_compared_over_seeds_and_images_with_holm_over_the_pairs_across(results):
    found = harness.compare_pairs([run_of(results, "rep_a"), run_of(results, "rep_b")])
    pairs = found.pairs
    assert len(pairs) == 9 and (pairs["seeds"] == 2).all()
    assert set(pairs["covers"]) == {"training seeds and validation images"}
    assert pairs["p_holm"].to_numpy() == pytest.approx(np.minimum(1, np.maximum.accumulate(
        np.sort(pairs["p_t"].to_numpy()) * np.arange(9, 0, -1)))[np.argsort(np.argsort(pairs["p_t"].to_numpy()))])
    assert (pairs["seeds_a_better"] + pairs["seeds_b_better"] <= 2).all()


def _edit_config(run_dir, edit):
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    edit(config)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.mark.parametrize(("edit", "said"), [
    (lambda c: c["data"].update(val_size=16), "data.val_size: one/"),
    (lambda c: c["train"].update(repeats=3), "some runs trained one seed and others several"),
    (lambda c: c["output"].update(rank_by="val_f1"), "the runs rank by different columns (a test split in one run ranks on test); "
                                                     "compare them on a validation score every run has, --metric val_f1 or --metric val_iou:"),
])
def test_runs_that_did_not_score_alike_are_refused_naming_what_differs(results, tmp_path, edit, said):
    one = run_of(results, "one")
    other = copy_of(one, tmp_path)
    _edit_config(other, edit)
    refused = run_main("compare", one, other, "--pairs")
    assert refused.returncode == 2 and said in " ".join(refused.stderr.split()), refused.stderr
    assert refused.stdout == "", "nothing is printed before the refusal"


def test_settings_that_only_change_training_do_not_refuse(results, tmp_path):
    one = run_of(results, "one")
    other = copy_of(one, tmp_path)
    _edit_config(other, lambda c: c["data"].update(batch_size=2, bootstrap_train=True, augment={"flip_left_right": True}))
    assert len(harness.compare_pairs([one, other]).pairs) == 9


def test_a_test_split_added_since_does_not_refuse_a_comparison_on_validation(results, tmp_path):
    """Synthetic test images are drawn after the validation ones: runs that differ only in their test
    split are paired on validation once its images check out one by one, and said so; compared on
    a test column the test split's settings must match."""
    one = run_of(results, "one")
    other = copy_of(one, tmp_path)
    _edit_config(other, lambda c: c["data"].update(test_size=16))
    compared = harness.compare_pairs([one, other], metric="val_iou")
    assert len(compared.pairs) == 9
    assert any("test splits differ (data.test_size: one/" in note and "found the same by their true masks" in note for note in compared.notes)
    grid = run_of(results, "grid_a")
    bigger = copy_of(grid, tmp_path)
    _edit_config(bigger, lambda c: c["data"].update(test_size=16))
    with pytest.raises(ConfigError, match="data settings differ"):
        harness.compare_pairs([grid, bigger], metric="test_iou")


def test_a_changed_mask_is_found_image_by_image(results, tmp_path):
    one = run_of(results, "one")
    other = copy_of(one, tmp_path)
    scores = read_csv(other / "val_scores.csv")
    scores.loc[scores["image"] == 5, "truth"] += 1  # what a mask file edited between the runs would show
    scores.to_csv(other / "val_scores.csv", index=False)
    with pytest.raises(ConfigError, match=r"the true masks of 1 of 8 images in val_scores.csv differ \(the first: image 5\)"):
        harness.compare_pairs([one, other])


def test_pairs_need_two_distinct_finished_runs(results, tmp_path):
    one = run_of(results, "one")
    assert "give two run directories" in run_main("compare", one, "--pairs").stderr
    assert "is given twice" in run_main("compare", one, one, "--pairs").stderr
    twice = run_main("compare", one, f"{one}/")  # the plain table too: one run's models listed with themselves otherwise
    assert twice.returncode == 2 and f"compare: {one} is given twice; each run's models" in twice.stderr and twice.stdout == ""
    unfinished = copy_of(one, tmp_path)
    (unfinished / "summary.csv").unlink()
    refused = run_main("compare", one, unfinished, "--pairs")
    assert refused.returncode == 2 and "no summary.csv" in refused.stderr


def test_other_library_versions_are_said(results, tmp_path):
    one = run_of(results, "one")
    other = copy_of(one, tmp_path)
    info = json.loads((other / "run.json").read_text())
    info["versions"]["tensorflow"] = "2.0.0"
    (other / "run.json").write_text(json.dumps(info))
    same, *notes = harness.compare_pairs([one, other]).notes
    assert same.startswith("Scored the same on every image in two runs") and same.endswith(f": fcn, unet, deconv of one/{one.name} and one/{other.name}.")  # a copy
    assert len(notes) == 1 and "tensorflow: one/" in notes[0] and "2.0.0" in notes[0]


def test_pairs_are_computed_without_tensorflow(results, tmp_path):
    """Read from files alone, like the rest of `compare`: no TensorFlow import (seconds)."""
    import subprocess
    import sys

    one = run_of(results, "one")
    again = copy_of(one, tmp_path)
    script = (
        "import sys\n"
        "from harness.cli import main\n"
        f"assert main(['compare', {str(one)!r}, {str(again)!r}, '--pairs']) == 0\n"
        "print(sorted(m for m in ('tensorflow', 'tf_keras', 'keras') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_runs_of_the_same_name_from_two_folders_are_told_apart_by_their_paths(results, tmp_path):
    one = run_of(results, "one")
    elsewhere = copy_of(one, tmp_path, run_id=one.name)  # the same experiment and run id, another folder
    pairs = harness.compare_pairs([one, elsewhere]).pairs
    assert len(pairs) == 9 and set(pairs["run_a"]) == {str(one)} and set(pairs["run_b"]) == {str(elsewhere)}


def test_data_found_at_other_paths_is_compared_when_its_images_check_out_one_by_one(results, tmp_path):
    one, other = (copy_of(run_of(results, "one"), tmp_path, run_id) for run_id in ("20261101-000000", "20261102-000000"))
    _edit_config(one, lambda c: c["data"].update(source="arrays", arrays="/data/shapes.npz"))
    _edit_config(other, lambda c: c["data"].update(source="arrays", arrays="/mnt/copy/shapes.npz"))
    found = harness.compare_pairs([one, other])
    assert len(found.pairs) == 9
    assert any("data.arrays: one/20261101-000000 = /data/shapes.npz, one/20261102-000000 = /mnt/copy/shapes.npz" in n
               and "found the same by their true masks" in n for n in found.notes), found.notes
    scores = read_csv(other / "val_scores.csv")
    scores.loc[scores["image"] == 0, "truth"] += 1
    scores.to_csv(other / "val_scores.csv", index=False)
    with pytest.raises(ConfigError, match="not scored on the same images"):
        harness.compare_pairs([one, other])


def test_chosen_compares_only_the_model_each_group_chose_on_validation(results):
    runs = [run_of(results, "grid_a"), run_of(results, "grid_b")]
    chosen = {r.name: set(read_csv(r / "summary.csv").query("chosen_in_group")["model"]) for r in runs}
    assert all(len(c) == 2 for c in chosen.values())  # one learning rate per architecture
    found = harness.compare_pairs(runs, chosen=True)
    assert found.rank == "test_iou" and len(found.pairs) == 4  # 2 chosen x 2 chosen
    assert set(found.pairs["model_a"]) == chosen[runs[0].name] and set(found.pairs["model_b"]) == chosen[runs[1].name]
    assert len(harness.compare_pairs(runs).pairs) == 16
    printed = run_main("compare", *runs, "--chosen")
    assert printed.returncode == 0 and "test_iou a - b" in printed.stdout, printed.stderr
    refused = run_main("compare", run_of(results, "one"), run_of(results, "two"), "--chosen")
    assert refused.returncode == 2 and "chose no model per group" in refused.stderr


def test_a_table_asked_for_at_a_path_that_cannot_be_written_is_named_not_a_crash(results, tmp_path):
    runs = [run_of(results, "one"), run_of(results, "two")]
    blocker = tmp_path / "a_file"
    blocker.write_text("mine")
    for option in ("--csv", "--pairs-csv"):
        refused = run_main("compare", *runs, option, blocker / "table.csv")
        assert refused.returncode == 2 and f"{option} {blocker / 'table.csv'}: cannot be written" in refused.stderr, refused.stderr
    assert blocker.read_text() == "mine"
    made = run_main("compare", *runs, "--pairs-csv", tmp_path / "new" / "pairs.csv")
    assert made.returncode == 0 and len(read_csv(tmp_path / "new" / "pairs.csv")) == 9


def test_metric_compares_on_another_column_even_where_the_runs_rank_differently(results, tmp_path):
    one = run_of(results, "one")
    ranked_on_f1 = copy_of(one, tmp_path)
    _edit_config(ranked_on_f1, lambda c: c["output"].update(rank_by="val_f1"))
    on_iou = harness.compare_pairs([one, ranked_on_f1], metric="val_iou").pairs
    same_ranking = harness.compare_pairs([one, copy_of(one, tmp_path, "20261102-000000")]).pairs
    for column in ("diff", "diff_low", "diff_high"):  # the ranking setting changes nothing but the default column
        assert on_iou[column].to_numpy() == pytest.approx(same_ranking[column].to_numpy(), abs=1e-12), column
    found = harness.compare_pairs([one, ranked_on_f1], metric="val_f1")
    assert found.rank == "val_f1" and len(found.pairs) == 9
    f1 = read_csv(one / "summary.csv").set_index("model")["val_f1"]
    across = found.pairs[(found.pairs["model_a"] == "fcn") & (found.pairs["model_b"] == "unet")].iloc[0]
    assert across["diff"] == pytest.approx(f1["fcn"] - f1["unet"], abs=1e-6)  # the difference of the runs' own F1 scores
    assert not (found.pairs["diff"] == on_iou["diff"]).all()
    printed = run_main("compare", one, ranked_on_f1, "--metric", "val_f1")
    assert printed.returncode == 0 and "val_f1 a - b" in printed.stdout, printed.stderr


def test_metric_that_a_run_does_not_have_is_named_with_the_columns_it_has(results, tmp_path):
    one = run_of(results, "one")
    refused = run_main("compare", one, copy_of(one, tmp_path), "--metric", "val_iuo")
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and "no val_iuo column" in said and refused.stdout == "", refused.stderr
    assert "did you mean 'val_iou'? (its score columns: " in said and "val_f1, val_iou, val_loss" in said and "_low" not in said, said
    with pytest.raises(ConfigError, match="one-seed runs have no per-image scores of ms_per_step"):  # a cost: one value per model
        harness.compare_pairs([one, copy_of(one, tmp_path, "20261102-000000")], metric="ms_per_step")


def not_the_copy(notes: list[str]) -> list[str]:
    """The notes but the one naming a copy's networks as the same (these tests compare copies)."""
    return [n for n in notes if not n.startswith("Scored the same on every image")]


def test_own_losses_of_models_trained_on_different_losses_are_noted(results, tmp_path):
    one = run_of(results, "one")  # deconv trains on focal+dice, fcn and unet on bce+dice
    notes = not_the_copy(harness.compare_pairs([one, copy_of(one, tmp_path)], metric="val_loss").notes)
    assert len(notes) == 1 and "val_loss is each model's own training loss" in notes[0] and "bce+dice, focal+dice" in notes[0], notes
    assert not_the_copy(harness.compare_pairs([one, copy_of(one, tmp_path, "20261102-000000")]).notes) == []  # IoU: the same measure whatever the loss
    one_loss = [copy_of(one, tmp_path, run_id) for run_id in ("20261103-000000", "20261104-000000")]
    for run in one_loss:
        _edit_config(run, lambda c: c["models"][2].update(loss="bce+dice"))
    assert not_the_copy(harness.compare_pairs(one_loss, metric="val_loss").notes) == []


def test_the_same_networks_in_two_runs_are_named_not_passed_off_as_a_pair_within_noise():
    # A run and its copy: every self-pair read "+0.0000, within image noise", as if two trainings agreed.
    from types import SimpleNamespace

    from harness.outputs.cross_run import _same_networks_note
    from harness.outputs.statistics import Scored

    def scored(*values):
        return {member: Scored({"intersection": np.array([[v], [v / 2]]), "truth": np.ones((2, 1))}, None) for member, v in values}

    first = SimpleNamespace(label="q/r0", scored=scored(("unet@1", 3.0), ("unet@2", 4.0), ("fcn@1", 1.0), ("fcn@2", 2.0)))
    copy = SimpleNamespace(label="q/r0-copy", scored=scored(("unet@1", 3.0), ("unet@2", 4.0), ("fcn@1", 1.0), ("fcn@2", 2.5)))
    other = SimpleNamespace(label="q/r1", scored=scored(("unet@1", 3.5), ("unet@2", 4.5)))
    assert _same_networks_note([first, copy, other]).endswith(": unet of q/r0 and q/r0-copy.")  # fcn's second seed differs
    assert _same_networks_note([first, other]) is None


def test_runs_of_different_repeats_say_the_pairs_rest_on_the_fewer_seeds():
    # a 20-seed run against a 3-seed one: "over 3 training seeds", and nothing said of the other 17
    from types import SimpleNamespace

    from harness.config.loading import validate_config
    from harness.outputs.cross_run import _seeds_note

    def run(label, repeats):
        return SimpleNamespace(label=label, config=validate_config(tiny_config(train={"repeats": repeats})))

    assert _seeds_note([run("s/a", 3), run("s/b", 3)]) is None
    note = _seeds_note([run("s/a", 20), run("s/b", 3), run("s/c", 5)])
    assert note.startswith("The runs trained different numbers of seeds (s/a 20, s/b 3, s/c 5): a pair across them is paired by repeat")
    assert note.endswith("a pair with a model of a 3-seed run rests on 3 seeds (the pairs' `seeds` column), not on 20.")


def test_a_model_that_did_not_finish_is_left_out_and_named_as_in_a_runs_own_pairs(results, tmp_path):
    """A diverged model's scores come from fewer steps: a run's own pairs leave it out, and so do
    pairs across runs (they once paired a diverged unet with every model of the other run)."""
    one = run_of(results, "one")
    other = copy_of(one, tmp_path)
    summary = read_csv(other / "summary.csv")
    summary.loc[summary["model"] == "unet", "status"] = "diverged"
    summary.to_csv(other / "summary.csv", index=False)
    found = harness.compare_pairs([one, other])
    assert len(found.pairs) == 6 and "unet" not in set(found.pairs["model_b"]) and "unet" in set(found.pairs["model_a"])
    assert f"Not compared, as they did not finish (a score from fewer steps): unet (diverged) of one/{other.name}." in found.notes
    assert not any(n.startswith("Scored the same") and "unet" in n for n in found.notes)  # fcn, deconv only
    summary.assign(status="diverged").to_csv(other / "summary.csv", index=False)
    with pytest.raises(ConfigError, match=f"no model of one/{other.name} finished .*deconv .diverged.*no final scores"):
        harness.compare_pairs([one, other])
    # With repeats, a seed that did not finish is left out of its model's seeds, and named.
    rep_a, rep_b = run_of(results, "rep_a"), run_of(results, "rep_b")
    copied = copy_of(rep_b, tmp_path)
    members = read_csv(copied / "summary_members.csv")
    members.loc[members["model"] == "fcn@2", "status"] = "diverged"
    members.to_csv(copied / "summary_members.csv", index=False)
    note = f"Not compared, as they did not finish (a score from fewer steps): fcn@2 (diverged) of rep_b/{copied.name}."
    assert note in harness.compare_pairs([rep_a, copied]).notes
