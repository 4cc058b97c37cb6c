"""Runs bigger than one fused step: packing, groups in processes of their own, one merged comparison,
out-of-memory splits, interrupt and resume. Groups always run in fresh processes, so the runs they
are compared with bit for bit are made by the real CLI too."""

from __future__ import annotations

import pytest

import json
import os
import signal
import time
from types import SimpleNamespace

from conftest import TINY_CONFIG, assert_same_training, only_run_dir, run_cli, start_cli, tiny_config, wait_for_run_dir, write_yaml

from harness.config.loading import validate_config
from harness.scale.groups import group_config, steps_every_group_reached
from harness.scale.packing import Need, makespan_s, pack, split_in_two, spread
from harness.scale.probe_member import cache_key, probe_config
from harness.rundir import read_csv


@pytest.mark.parametrize("recipe", [{"race": {"rungs": [1], "keep": 0.5, "metric": "val_iou"}}, {"early_stopping": {"patience": 2}}])
def test_a_members_probe_config_is_one_model_without_the_runs_race_or_early_stop(recipe):
    config = validate_config(tiny_config(train={"repeats": 2, **recipe}))
    probe = validate_config(probe_config(config, "fcn"), accepted=True)  # a race of one model is refused
    assert [m.name for m in probe.member_specs()] == ["fcn"] and probe.train.race is None and probe.train.early_stopping is None


# -- packing: pure functions --------------------------------------------------------------------


def test_first_fit_decreasing_packs_largest_first_and_keeps_config_order_inside():
    needs = [Need("a", 300), Need("b", 300), Need("c", 500), Need("d", 2000)]
    packing = pack(needs, budget_mb=1000, max_members=None)
    assert [g.members for g in packing.groups] == [["a", "c"], ["b"]]
    assert [g.memory_mb for g in packing.groups] == [800, 300]
    assert [n.name for n in packing.too_big] == ["d"]


def test_a_group_size_limit_alone_packs_by_count_in_config_order():
    packing = pack([Need(n) for n in "abcde"], budget_mb=None, max_members=2)
    assert [g.members for g in packing.groups] == [["a", "b"], ["c", "d"], ["e"]]
    assert all(g.ms_per_step is None for g in packing.groups)  # unmeasured: no time estimate


def test_a_group_that_ran_out_of_memory_splits_into_balanced_halves():
    memory = {"a": 100, "b": 700, "c": 300, "d": 300}
    assert split_in_two(["a", "b", "c", "d"], memory) == (["b"], ["a", "c", "d"])
    assert split_in_two(["x", "y"], {}) == (["x"], ["y"])


def test_more_devices_than_groups_split_the_slowest_group_first():
    needs = [Need("a", 100, 10.0), Need("b", 100, 30.0), Need("c", 100, 5.0)]
    one = pack(needs, budget_mb=1000, max_members=None).groups
    assert [g.members for g in one] == [["a", "b", "c"]]
    two = spread(pack(needs, 1000, None).groups, needs, slots=2)
    assert [g.members for g in two] == [["b"], ["a", "c"]] and [g.name for g in two] == ["g1", "g2"]
    assert [g.ms_per_step for g in two] == [30.0, 15.0]
    assert [g.members for g in spread(pack(needs, 1000, None).groups, needs, slots=8)] == [["b"], ["a"], ["c"]]
    assert [g.members for g in spread(pack(needs, 1000, None).groups, needs, slots=1)] == [["a", "b", "c"]]


def test_a_runs_steps_are_those_every_training_group_reached():
    groups = [{"status": "completed", "steps_done": 8}, {"status": "running", "steps_done": None}]
    assert steps_every_group_reached(groups) == 0  # the second group has not reported a step yet
    groups[1].update(status="completed", steps_done=8)
    assert steps_every_group_reached(groups + [{"status": "split", "steps_done": 3}, {"status": "oom", "steps_done": 0}]) == 8
    assert steps_every_group_reached([]) == 0


def test_the_estimate_counts_each_groups_trace_before_its_steps():
    """backbones.yaml (12 sm members, 24 steps) was estimated at 2.5 min from its steps alone; the
    run's first call, tracing, took 3 min 18 s of its 7."""
    from harness.scale.plan import Devices, Plan

    needs = [Need("a", 100, 500.0, 20.0), Need("b", 100, 1500.0, 40.0), Need("c", 100, 1000.0, None)]
    measured = pack(needs[:2], 1000, None).groups
    assert [(g.ms_per_step, g.trace_s) for g in measured] == [(2000.0, 60.0)]
    plan = Plan(None, None, Devices(0, None, (None,)), [], measured, [], total_steps=24)
    assert plan.group_seconds == [60.0 + 48.0] and plan.estimated_s == 108.0 and plan.trace_s == 60.0
    assert "estimated training time: 1.8 min for 24 steps, 60 s of it tracing" in plan.describe()[-1]
    unmeasured = pack(needs, 1000, None).groups
    assert unmeasured[0].trace_s is None and Plan(None, None, Devices(0, None, (None,)), [], unmeasured, [], 24).trace_s is None


def test_a_races_estimate_keeps_the_fastest_or_the_slowest_models_at_each_rung():
    """A race's plan gave only every member's time to the end: race.yaml's rungs leave 3 of 8
    members for half its steps, and a race took 0.62-0.67 of its full run."""
    from harness.scale.plan import Devices, Plan

    needs = [Need("a", 100, 10.0, 1.0), Need("b", 100, 20.0, 1.0), Need("c", 100, 30.0, 1.0), Need("d", 100, 40.0, 1.0)]
    models = [{"model": n.name, "ms_per_step": n.ms_per_step} for n in needs]
    one = pack(needs, None, None).groups
    plan = Plan(None, None, Devices(0, None, (None,)), models, one, [], total_steps=300, race_rung_steps=(100, 200), race_keep=0.5)
    assert plan.race_kept == [2, 1] and plan.estimated_s == 4.0 + 100 * 300 / 1000
    # 100 steps of all four (100 ms), 100 of two (30 or 70 ms), 100 of one (10 or 40 ms), then the trace
    assert plan.race_estimated_s == pytest.approx((4.0 + (10_000 + 3_000 + 1_000) / 1000, 4.0 + (10_000 + 7_000 + 4_000) / 1000))
    assert "keep 2 then 1 of the 4 models: about 18 s to 25 s with its trace" in plan.describe()[-1]
    assert "estimated training time with every member to the end: 34 s" in plan.describe()[-2]
    written = json.loads(json.dumps(plan.to_json()))  # plan.json
    assert written["race_estimated_s"] == pytest.approx(list(plan.race_estimated_s)) and written["race_kept"] == [2, 1]
    plain = Plan(None, None, Devices(0, None, (None,)), models, one, [], total_steps=300)
    assert plain.race_estimated_s is None and "the race" not in " ".join(plain.describe())
    two = pack(needs, 150, None).groups  # a race runs in one fused step: no race estimate over groups
    split = Plan(None, None, Devices(0, None, (None,)), models, two, [], total_steps=300, race_rung_steps=(100, 200), race_keep=0.5)
    assert len(two) > 1 and split.race_estimated_s is None


def test_makespan_fills_the_first_free_slot():
    assert makespan_s([4, 3, 2, 1], slots=2) == 5
    assert makespan_s([4, 3, 2, 1], slots=1) == 10


def test_a_group_config_keeps_the_runs_common_loss_and_trains_in_one_step():
    config = validate_config(tiny_config(placement={"max_members_per_group": 2, "parallel_groups": 2}, output={"progress": "bar"}))
    group = group_config(config, ["deconv"], parallel=True)  # deconv alone trains on focal+dice
    assert [m.name for m in group.models] == ["deconv"]
    assert group.compare_loss() == config.compare_loss() == "bce+dice"
    assert group.placement.grouping == "single" and group.placement.max_members_per_group is None
    assert group.output.progress == "lines" and group.output.mlflow is None
    assert group.data == config.data and group.seed == config.seed  # the same batches, the same start


# -- runs of several groups, through the real CLI -------------------------------------------------


def test_members_in_groups_train_bit_for_bit_as_in_one_group(one_group, tmp_path):
    # two groups at once on the CPU (placement.parallel_groups): the same bits as one fused step
    config = tiny_config(placement={"max_members_per_group": 2, "parallel_groups": 2}, output={"progress": "lines"})
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "r")
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "r")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed"
    assert [(g["name"], g["members"], g["status"]) for g in info["groups"]] == [("g1", ["fcn", "unet"], "completed"), ("g2", ["deconv"], "completed")]
    assert all(g["peak_rss_mb"] > 0 and g["device"] == "CPU" for g in info["groups"])
    assert info["hardware"] == json.loads((run_dir / "groups" / "g1" / "run.json").read_text())["hardware"]  # local groups: this machine
    assert all(g["hardware"] == info["hardware"] for g in info["groups"])  # each group says its own
    g1, g2 = info["groups"]
    assert g2["started"] < g1["ended"], "the two groups should have run at the same time"
    assert_same_training(run_dir, one_group)
    # ONE comparison: every member ranked, every pair across groups, one TensorBoard folder each
    summary = read_csv(run_dir / "summary.csv")
    assert sorted(summary["model"]) == ["deconv", "fcn", "unet"] and set(summary["status"]) == {"ok"}
    pairs = read_csv(run_dir / "pairs.csv")
    assert len(pairs) == 3 and pairs["steps"].eq(8).all()
    assert sorted(p.name for p in (run_dir / "tb").iterdir()) == ["deconv", "fcn", "unet"]
    assert "<h2>Groups</h2>" in (run_dir / "report.html").read_text() and (run_dir / "plan.json").exists()
    assert "group g2 (1 member(s): deconv) started on CPU" in done.stderr
    # The groups' processes load TensorFlow as the driver does, without its C++ start-up lines
    # ("failed call to cuInit" on a machine without a GPU): a level harness chose is not the user's.
    assert not [line for line in done.stderr.splitlines() if line.startswith(("WARNING: All log messages before absl", "I0000 ", "E0000 ", "W0000 "))], done.stderr


def test_interrupted_groups_resume_and_only_unfinished_groups_run_again(one_group, tmp_path):
    config = tiny_config(placement={"max_members_per_group": 2}, output={"progress": "lines"})
    results = tmp_path / "r"
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", results)
    run_dir = wait_for_run_dir(results, process)
    assert run_dir is not None
    deadline = time.monotonic() + 120
    while not (run_dir / "groups" / "g2" / "losses.csv").exists():  # g1 (fcn, unet) done, g2 (deconv) training
        assert time.monotonic() < deadline and process.poll() is None, "g2 never started"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["groups"][0]["status"] == "completed"
    assert info["groups"][0]["steps_done"] == 8 and info["steps_done"] < 8  # the step every group reached

    done = run_cli("resume", run_dir)
    assert done.returncode == 0, done.stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed"
    assert [g["attempts"] for g in info["groups"]][0] == 1  # the completed group was not run again
    assert all(g["status"] == "completed" for g in info["groups"]) and info["steps_done"] == 8
    assert_same_training(run_dir, one_group)  # resumed groups: bit for bit too


def test_a_group_a_second_ctrl_c_stopped_at_once_is_interrupted_and_the_run_says_which(tmp_path):
    """A group process a second Ctrl-C ended (exit 130, no new checkpoint) was "failed: its process
    exited with code 130", and the run then said every running group had saved a checkpoint."""
    from harness.errors import EXIT_INTERRUPTED, EXIT_STOPPED_AT_ONCE, Interrupted
    from harness.rundir import RunDir, RunRecord
    from harness.scale.engines import GroupTask
    from harness.scale.groups import GroupsRun, new_group_entry

    config = validate_config(tiny_config(placement={"max_members_per_group": 2}, output={"progress": "none"}))
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    record = RunRecord.from_dict({"name": "tiny", "status": "running", "groups": [
        new_group_entry("g1", ["fcn", "unet"], config, None), new_group_entry("g2", ["deconv"], config, None)]})
    driver = GroupsRun(config, run, record, engine=None, memory_of={}, finish=lambda _: None, stopping=True)
    for name, code in (("g1", EXIT_INTERRUPTED), ("g2", EXIT_STOPPED_AT_ONCE)):
        assert driver._outcome(GroupTask(name, run.group(name).path, (), {}), code) == []
    assert [g["status"] for g in record.groups] == ["interrupted", "interrupted"] and driver.stopped_at_once == ["g2"]

    class Stopped:
        signal, name = 2, "SIGINT"

    with pytest.raises(Interrupted, match="g2 stopped at once .Ctrl-C again. and keeps its newest checkpoint, every other group"):
        driver._conclude(Stopped())


def test_a_signal_while_the_groups_are_merged_is_answered_and_the_merge_finished(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the driver merged the trained groups printed "harness: interrupted" (exit 130)
    and left run.json saying running. The merge takes seconds and trains nothing: the signal is
    answered, the merge finished, and the handlers before it come back."""
    from harness.rundir import RunDir, RunRecord
    from harness.scale import groups as driver_module
    from harness.scale.groups import GroupsRun, new_group_entry

    config = validate_config(tiny_config(placement={"max_members_per_group": 2}, output={"progress": "none"}))
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    record = RunRecord.from_dict({"name": "tiny", "status": "running", "groups": [{**new_group_entry("g1", ["fcn"], config, None), "status": "completed"}]})
    monkeypatch.setattr(driver_module, "merge_groups", lambda run, groups: {})  # no group folders here: nothing to merge
    finished, unhandled = [], []

    def finish(driver):
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "SIGTERM received" not in (said := capsys.readouterr().err) and time.monotonic() < deadline:
            time.sleep(0.02)  # said by the thread that reads the signal's pipe
        finished.append(said)

    def guard(*args):  # where the default handler would have ended the process
        unhandled.append(args)

    before = signal.signal(signal.SIGTERM, guard)
    try:
        GroupsRun(config, run, record, engine=None, memory_of={}, finish=finish)._conclude(SimpleNamespace(signal=None, name=""))
        assert signal.getsignal(signal.SIGTERM) is guard and not unhandled
    finally:
        signal.signal(signal.SIGTERM, before)
    assert "every group is trained; harness merges them" in finished[0], finished


def test_a_group_out_of_memory_is_split_and_a_member_too_big_alone_is_oom(tmp_path):
    """Measured memory (planted in the plan's cache): deconv 800 MB, fcn and unet 300 MB, a budget
    of 1200 MB: g1 = deconv + fcn (1100 MB), g2 = unet. The device really has 700 MB: g1 fails
    at its first step with the error TensorFlow raises, is split; deconv alone fails again and is
    marked oom; fcn and unet complete and the run exits 0 with a warning."""
    config = tiny_config(placement={"memory_budget_mb": 1200}, output={"progress": "lines"})
    cache = tmp_path / "r" / ".plan-cache"
    cache.mkdir(parents=True)
    resolved = validate_config(config)
    for name, mb in (("fcn", 300), ("unet", 300), ("deconv", 800)):
        raw = probe_config(resolved, name)
        figures = {"model": name, "params": 1, "flops_per_example": 1, "peak_mb": mb, "ms_per_step": 1.0, "trace_s": 1.0, "memory_from": "planted"}
        (cache / f"{cache_key(raw, 'cpu')}.json").write_text(json.dumps(figures))
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "r", env={"HARNESS_TEST_DEVICE_MB": "700"})
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "r")
    info = json.loads((run_dir / "run.json").read_text())
    groups = {g["name"]: g for g in info["groups"]}
    assert groups["g1"]["status"] == "split" and groups["g1"]["split_into"] == ["g1a", "g1b"]
    assert (groups["g1a"]["members"], groups["g1a"]["status"]) == (["deconv"], "oom")
    assert (groups["g1b"]["members"], groups["g1b"]["status"]) == (["fcn"], "completed")
    assert groups["g2"]["status"] == "completed" and info["steps_done"] == 8  # the oom group is not waited for
    assert info["models"]["deconv"]["status"] == "oom" and info["models"]["fcn"]["status"] == "ok"
    assert "group g1 ran out of device memory: split into g1a (deconv) and g1b (fcn)" in done.stderr
    assert "deconv did not fit in device memory even alone (status oom)" in done.stderr
    summary = read_csv(run_dir / "summary.csv").set_index("model")
    assert summary.loc["deconv", "status"] == "oom" and summary.loc["unet", "status"] == "ok"


def test_plan_measures_each_model_once_and_caches_it(tmp_path):
    config = write_yaml(tmp_path / "c.yaml", {**TINY_CONFIG, "placement": {"max_members_per_group": 2}})
    first = run_cli("plan", config, "--results", tmp_path / "r")
    assert first.returncode == 0, first.stderr
    plan = json.loads((tmp_path / "r" / "tiny" / "plan.json").read_text())
    models = {m["model"]: m for m in plan["models"]}
    assert models["unet"]["params"] > models["fcn"]["params"] > 0
    assert all(m["peak_mb"] > 0 and m["ms_per_step"] > 0 and m["flops_per_example"] > 0 for m in models.values())
    assert sum(len(g["members"]) for g in plan["groups"]) == 3 and all(len(g["members"]) <= 2 for g in plan["groups"])
    assert "group g1 on CPU" in first.stdout and "estimated training time" in first.stdout and "of it tracing" in first.stdout
    assert all(m["trace_s"] > 0 for m in models.values()) and plan["trace_s"] > 0  # each model's first call alone
    import harness

    plan = harness.plan(config, results_dir=tmp_path / "r")  # the API, the second time: all from the cache
    assert [m["model"] for m in plan.models] == ["fcn", "unet", "deconv"] and all(m["cached"] for m in plan.models)
    assert all("(cached)" in line for line in plan.describe()[1:4])
    assert [g.members for g in plan.groups] == [g["members"] for g in json.loads((tmp_path / "r" / "tiny" / "plan.json").read_text())["groups"]]


@pytest.mark.slow
def test_nightly_runs_a_multi_group_experiment(tmp_path):
    import harness

    config = write_yaml(tmp_path / "c.yaml", tiny_config(placement={"max_members_per_group": 2}))
    night = harness.nightly(config, results_dir=tmp_path / "r", night="2026-11-19")
    assert night.exit_code == 0 and not night.regressions
    assert {"deconv val_iou", "fcn val_iou", "unet val_iou"} <= set(harness.history("tiny", results_dir=tmp_path / "r").columns)
    assert len(list(night.run_dir.glob("groups/*/checkpoints"))) == 2


def test_retention_removes_the_checkpoints_of_groups_too(tmp_path):
    from types import SimpleNamespace

    from harness.nights.tonight import apply_retention

    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old / "groups" / "g1" / "checkpoints", old / "groups" / "g2" / "checkpoints", new / "groups" / "g1" / "checkpoints"):
        folder.mkdir(parents=True)
    (old / "summary.csv").write_text("model\n")
    store = SimpleNamespace(runs=lambda: [SimpleNamespace(run_id="old", run_dir=str(old)), SimpleNamespace(run_id="new", run_dir=str(new))], baseline=lambda: None)
    assert apply_retention(store, keep_runs=1) == ["old"]
    assert not list(old.glob("groups/*/checkpoints")) and (old / "summary.csv").exists()
    assert (new / "groups" / "g1" / "checkpoints").is_dir()
