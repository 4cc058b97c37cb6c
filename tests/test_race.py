"""The race: the rung rule as a pure function, and runs where members dropped at rungs leave the
fused step while the others train on bit for bit as in the full run, also through a resume."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal

import numpy as np
import pandas as pd
import pytest
from conftest import Killed, only_run_dir, run_cli, saved_members, start_cli, tiny_config, wait_for_rows, wait_for_run_dir, weights_of, write_yaml

import harness
from harness.config.loading import validate_config
from harness.errors import ConfigError
from harness.training.eval_actions import rung_said
from harness.training.race import Race, correlations, decide, make_race
from harness.rundir import read_csv

FOUR = [
    {"name": "fcn", "arch": "tiny_fcn"},
    {"name": "unet", "arch": "tiny_unet"},
    {"name": "wide", "arch": "tiny_fcn", "options": {"width": 12}},
    {"name": "deconv", "arch": "tiny_deconv", "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9}},  # one loss: a race by val_loss
]
RACE = {"rungs": [1, 2], "keep": 0.5, "metric": "val_loss"}


def test_a_rung_keeps_the_best_half_and_everyone_tied_with_the_last_kept():
    ranking, dropped = decide({"a": 0.9, "b": 0.5, "c": 0.7, "d": 0.1}, keep=0.5, higher=True)
    assert [(r["model"], r["rank"], r["kept"]) for r in ranking] == [("a", 1, True), ("c", 2, True), ("b", 3, False), ("d", 4, False)]
    assert dropped == ["b", "d"]
    _, dropped = decide({"a": 0.9, "b": 0.7, "c": 0.7, "d": 0.1}, keep=0.5, higher=True)
    assert dropped == ["d"]  # b ties with c, the last one kept
    _, dropped = decide({"a": 0.2, "b": 0.1, "c": float("nan")}, keep=0.3, higher=False)
    assert dropped == ["a", "c"]  # a loss: lower is better; NaN ranks last; at least one is kept


def test_with_repeats_a_models_seeds_are_ranked_by_their_mean_and_go_together():
    values = {"a@1": 0.9, "a@2": 0.1, "b@1": 0.6, "b@2": 0.6, "c@1": 0.2, "c@2": 0.3}
    ranking, dropped = decide(values, keep=0.5, higher=True)
    assert [r["model"] for r in ranking] == ["b", "a", "c"]  # b 0.6, a 0.5, c 0.25
    assert sorted(dropped) == ["c@1", "c@2"]
    race = Race("val_iou", 0.5, {4: 1})
    said = rung_said(race.decide(4, values), len(values), "val_iou")  # it said "4 of 6 member(s) kept"
    assert said == "race rung 1 (epoch 1): 2 of 3 model(s) kept by val_iou (4 of 6 members: each model's seeds go together, ranked by their mean)"
    assert rung_said(race.decide(4, {"a": 0.9, "b": 0.1}), 2, "val_iou").endswith(": 1 of 2 model(s) kept by val_iou")


def test_rung_correlations_use_the_models_that_finished():
    rungs = [{"rung": 1, "epoch": 1, "ranking": [{"model": m, "value": v} for m, v in [("a", 0.1), ("b", 0.2), ("c", 0.3), ("d", 0.4)]]}]
    (same,) = correlations(rungs, {"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.8}, higher=True)
    assert same["spearman"] == 1.0 and same["models_finished"] == 4
    (reversed_,) = correlations(rungs, {"a": 0.8, "b": 0.7, "c": 0.6}, higher=True)
    assert reversed_["spearman"] == -1.0 and reversed_["models_finished"] == 3
    (too_few,) = correlations(rungs, {"a": 0.8, "b": 0.7}, higher=True)
    assert too_few["spearman"] is None and "needs 3" in too_few["note"]


def test_a_rung_at_the_end_of_the_run_is_refused_and_a_resume_keeps_only_rungs_before_its_step():
    with pytest.raises(ConfigError) as refused:
        validate_config(tiny_config(train={"epochs": 2, "race": {"rungs": [2]}}))  # as the config is read
    assert "train.race.rungs: epoch(s) [2] are at or after the end" in refused.value.render()
    info = {"race": {"rungs": [{"rung": 1, "step": 4}, {"rung": 2, "step": 8}]}}
    spec = validate_config(tiny_config(train={"epochs": 3, "race": {"rungs": [1, 2]}})).train.race
    race = make_race(spec, 4, 12, info, start=6)
    assert [r["step"] for r in race.rungs] == [4] and race.due(8) and not race.due(4)


@pytest.mark.parametrize("rungs", [[], [2, 1], [1, 1]])
def test_rungs_must_be_given_in_increasing_order(rungs):
    with pytest.raises(ConfigError) as raised:
        validate_config(tiny_config(train={"race": {"rungs": rungs}}))
    assert "train.race: rungs: one or more epochs in increasing order" in raised.value.render()


def race_config(**train) -> dict:
    return tiny_config(models=FOUR, train={"epochs": 3, **train}, output={"probe_steps": 0, "progress": "none"})


@pytest.fixture(scope="module")
def full_and_race(tmp_path_factory):
    folder = tmp_path_factory.mktemp("race")
    full = harness.run(validate_config(race_config()), results_dir=folder / "full")
    race = harness.run(validate_config(race_config(race=RACE)), results_dir=folder / "race")
    return full, race


@pytest.mark.slow
def test_dropped_members_leave_the_step_and_the_rest_train_as_in_the_full_run(full_and_race):
    full, race = full_and_race
    models, rungs = race.info["models"], race.info["race"]["rungs"]
    assert [(r["epoch"], r["step"], r["members_after"]) for r in rungs] == [(1, 4, 2), (2, 8, 1)]
    dropped = {name: m["changed_at_step"] for name, m in models.items() if m["status"] == "dropped"}
    assert sorted(dropped.values()) == [4, 4, 8] and len(dropped) == 3
    # Ranked by val_loss at each rung of the full run's own validations: the same decisions.
    val = full.losses[(full.losses["split"] == "val") & (full.losses["metric"] == "loss")]
    at_one = val[val["step"] == 4].sort_values("value")["model"].tolist()
    assert [r["model"] for r in rungs[0]["ranking"]] == at_one and set(at_one[2:]) == {n for n, s in dropped.items() if s == 4}
    for name in models:
        last = dropped.get(name, 12)
        mine = race.losses[race.losses["model"] == name].sort_values(["step", "split", "metric"]).reset_index(drop=True)
        theirs = full.losses[(full.losses["model"] == name) & (full.losses["step"] <= last)].sort_values(["step", "split", "metric"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True)
    # On one replica the dropped members are switched off: the step is traced once, as the full run's.
    # So is the eval function: the dropped members are switched off in it too.
    assert race.info["trace_count"] == 1 and full.info["trace_count"] == 1
    assert race.info["eval_trace_count"] == 1 and full.info["eval_trace_count"] == 1
    assert "rebuilds" not in full.info or not full.info["rebuilds"]
    assert all(r["retraced"] is False and r["traces"] == 0 for r in rungs)
    assert [r["retraced"] for r in race.info["rebuilds"]] == [False] * 2
    correlations = race.info["race"]["correlations"]
    assert [c["models_finished"] for c in correlations] == [1, 1] and all(c["spearman"] is None for c in correlations)
    summary = race.summary
    assert summary["status"].tolist() == ["ok", "dropped", "dropped", "dropped"]  # the race's winner first,
    assert summary["steps"].tolist()[:2] == [12, 8]  # then those dropped later before those dropped sooner


@pytest.mark.slow
def test_after_a_race_the_test_split_is_scored_by_the_runs_eval_function_as_by_a_new_one(tmp_path, monkeypatch):
    """Every member is scored on test, the dropped ones too (with their best weights), by the
    run's own eval function with every switch on for the call: no new trace, and the same
    scores to the bit as an eval function traced afresh over them (no switches)."""
    from harness.training.compiled import CompiledMembers

    config = tiny_config(models=FOUR, data={"test_size": 4}, train={"epochs": 2, "race": {**RACE, "rungs": [1]}},
                         output={"probe_steps": 0, "progress": "none", "sample_images": 0})
    reused = harness.run(validate_config(config), results_dir=tmp_path / "reused")
    assert sorted(m["status"] for m in reused.info["models"].values()) == ["dropped", "dropped", "ok", "ok"]
    assert reused.info["eval_trace_count"] == 1
    monkeypatch.setattr(CompiledMembers, "eval_fn_over", lambda self, members: None)  # a new eval function
    fresh = harness.run(validate_config(config), results_dir=tmp_path / "fresh")
    scores = [read_csv(run.run_dir / "test_scores.csv") for run in (reused, fresh)]
    assert scores[0].groupby("model").size().to_dict() == {m["name"]: 4 for m in FOUR}
    pd.testing.assert_frame_equal(*scores, check_exact=True)


@pytest.mark.slow
def test_a_race_checkpoints_only_the_members_still_racing_and_restores_the_others_from_left(full_and_race, tmp_path):
    from harness.core.backend import import_tf
    from harness.members.registry import build_members
    from harness.training import checkpoints as ckpt

    full, race = full_and_race
    names = [m["name"] for m in FOUR]
    dropped = {names.index(n) for n, m in race.info["models"].items() if m["status"] == "dropped"}
    folder = race.run_dir / "checkpoints"
    assert saved_members(folder / "ckpt-12") == set(range(4)) - dropped  # after both rungs: the winner alone
    assert saved_members(folder / "ckpt-4") == set(range(4)) - {i for i in dropped if race.info["models"][names[i]]["changed_at_step"] == 4}
    assert saved_members(full.run_dir / "checkpoints" / "ckpt-12") == set(range(4))
    assert sorted(p.name for p in (folder / "left").iterdir()) == [f"member-{i}" for i in sorted(dropped)]
    # Restored in a fresh set of members: those left out come from left/, each as the run exported it.
    with import_tf().distribute.OneDeviceStrategy("/cpu:0").scope():
        members = build_members(validate_config(race_config(race=RACE)))
        step = import_tf().Variable(0, dtype=import_tf().int64)
    checkpoint = ckpt.make_checkpoint(members, step, race.info["run_token"])
    assert ckpt.restore_newest_valid(checkpoint, folder, race.info["checkpoints"]).step == 12
    for member in members:
        for a, b in zip(member.model.get_weights(), weights_of(race.run_dir / "models" / member.name / "model.keras")):
            np.testing.assert_array_equal(a, b)
    # A left/ folder gone (in a copy): the checkpoints that need it do not restore, and say why.
    damaged = shutil.copytree(folder, tmp_path / "checkpoints")
    shutil.rmtree(damaged / "left" / f"member-{min(dropped)}")
    with pytest.raises(ckpt.NoValidCheckpoint) as refused:
        ckpt.restore_newest_valid(checkpoint, damaged, race.info["checkpoints"])
    assert f"{names[min(dropped)]} left the run before it, and its state" in "\n".join(refused.value.problems)


@pytest.mark.slow
def test_a_race_checkpointed_with_every_member_resumes_and_writes_left_for_the_dropped(full_and_race, tmp_path, monkeypatch):
    # A checkpoint written before left/ existed holds every member, also those dropped before it:
    # such a run, resumed, writes left/ for them at its first save and ends as the race did.
    from harness.training import checkpoints as ckpt

    _, race = full_and_race
    real_save = ckpt.save

    def old_save(checkpoint, directory, step):
        checkpoint.left = set()  # every member in the checkpoint, as before
        real_save(checkpoint, directory, step)
        if step == 8:
            raise Killed  # after rung 2's checkpoint was written, before it was recorded: resume from step 4

    with monkeypatch.context() as patch:
        patch.setattr(ckpt, "save", old_save)
        with pytest.raises(Killed):
            harness.run(validate_config(race_config(race=RACE)), results_dir=tmp_path)
    (run_dir,) = (tmp_path / "tiny").iterdir()
    assert saved_members(run_dir / "checkpoints" / "ckpt-4") == set(range(4)) and not (run_dir / "checkpoints" / "left").exists()
    resumed = harness.resume(run_dir)
    assert resumed.info["resumes"][0]["from_step"] == 4
    names = [m["name"] for m in FOUR]
    dropped = {names.index(n) for n, m in race.info["models"].items() if m["status"] == "dropped"}
    assert saved_members(run_dir / "checkpoints" / "ckpt-12") == set(range(4)) - dropped
    assert sorted(p.name for p in (run_dir / "checkpoints" / "left").iterdir()) == [f"member-{i}" for i in sorted(dropped)]
    for name in names:
        for a, b in zip(weights_of(run_dir / "models" / name / "model.keras"), weights_of(race.run_dir / "models" / name / "model.keras")):
            np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_over_several_replicas_a_rung_rebuilds_the_step_and_times_its_first_call(tmp_path):
    # A switch around a cross-replica sum would be a sync point inside control flow: mirrored rebuilds.
    raw = race_config(race=RACE)
    raw["placement"] = {"strategy": "mirrored", "logical_cpus": 2}
    race = harness.run(validate_config(raw), results_dir=tmp_path)
    rungs = race.info["race"]["rungs"]
    assert race.info["trace_count"] == 3 and all(r["traces"] == 1 and r["first_call_s"] > 0 for r in rungs)
    assert race.summary["status"].tolist().count("dropped") == 3


@pytest.mark.slow
def test_the_report_shows_the_rungs_and_where_members_left(full_and_race):
    _, race = full_and_race
    page = (race.run_dir / "report.html").read_text()
    assert "<h2>Race</h2>" in page and "rung 1 (epoch 1, step 4)" in page and "dropped at step 4: race rung 1 (epoch 1)" in page


def test_a_race_interrupted_after_a_rung_and_resumed_equals_the_uninterrupted_race(tmp_path):
    # Both through the real CLI: a fresh process each, as every bit-for-bit resume test compares.
    config = race_config(race=RACE, steps_per_call=1)
    done = run_cli("run", write_yaml(tmp_path / "u.yaml", config), "--results", tmp_path / "u")
    assert done.returncode == 0, done.stderr
    uninterrupted = harness.load_run(only_run_dir(tmp_path / "u"))
    results = tmp_path / "r"
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", {**config, "output": {"probe_steps": 0, "progress": "lines"}}), "--results", results)
    run_dir = wait_for_run_dir(results, process)
    assert wait_for_rows(run_dir / "losses.csv", 46, process=process), "finished before it could be stopped"  # past rung 1 (44 rows by its validation)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == 75
    done = run_cli("resume", run_dir)
    assert done.returncode == 0, done.stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert 4 <= info["resumes"][0]["from_step"] < 12  # after rung 1: the resumed step leaves its dropped members out
    assert [r["dropped"] for r in info["race"]["rungs"]] == [r["dropped"] for r in uninterrupted.info["race"]["rungs"]]
    resumed = read_csv(run_dir / "losses.csv").sort_values(["model", "step", "split", "metric"]).reset_index(drop=True)
    expected = uninterrupted.losses.sort_values(["model", "step", "split", "metric"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(resumed, expected, check_exact=True)
    # The members dropped before the restored step came back from checkpoints/left/: the same final weights.
    for name in (n for n, m in info["models"].items() if m["status"] == "dropped" and m["changed_at_step"] <= info["resumes"][0]["from_step"]):
        for a, b in zip(weights_of(run_dir / "models" / name / "model.keras"), weights_of(uninterrupted.run_dir / "models" / name / "model.keras")):
            np.testing.assert_array_equal(a, b)


def test_a_race_over_several_groups_is_refused_with_the_reason(tmp_path):
    config = race_config(race=RACE)
    config["placement"] = {"max_members_per_group": 2}
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path)
    assert done.returncode == 2, done.stderr
    assert "train.race: the plan splits the members into 2 groups" in done.stderr
    assert not (tmp_path / "tiny").exists() or not any((tmp_path / "tiny").iterdir())


@pytest.mark.slow
def test_the_nightly_history_keeps_each_rungs_correlation(full_and_race, tmp_path):
    from harness.nights.history import HistoryStore
    from harness.nights.tonight import history_table, measurements
    from harness.rundir import RunDir

    _, race = full_and_race
    store = HistoryStore(tmp_path / "history.sqlite")
    recorded = measurements(RunDir(race.run_dir), night="2026-11-20", commit=None, regressions=0)
    planted = dataclasses.replace(recorded, record=dataclasses.replace(recorded.record, run_id="earlier", night="2026-11-19"),
                                  race=({"rung": 1, "epoch": 1, "models_finished": 4, "spearman": 0.4},))
    store.record_run(planted)
    store.record_run(recorded)
    rungs = store.race_table()
    assert rungs[["run_id", "rung", "models_finished"]].values.tolist() == [["earlier", 1, 4], [race.run_dir.name, 1, 1], [race.run_dir.name, 2, 1]]
    table = history_table(store).set_index("run_id")
    assert table.loc["earlier", "spearman rung 1 (epoch 1)"] == 0.4
    assert pd.isna(table.loc[race.run_dir.name, "spearman rung 2 (epoch 2)"])  # one model finished: no correlation
