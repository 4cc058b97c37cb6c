"""Runs bigger than one fused step: packing, groups in processes of their own, one merged comparison,
out-of-memory splits, interrupt and resume. Groups always run in fresh processes, so the runs they
are compared with bit for bit are made by the real CLI too."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY_CONFIG, only_run_dir, run_cli, start_cli, tiny_config, wait_for_run_dir, write_yaml

from harness.config.loading import validate_config
from harness.core.backend import import_keras
from harness.scale.groups import group_config
from harness.scale.packing import Need, makespan_s, pack, split_in_two
from harness.scale.probe_member import cache_key, probe_config

CONFIG = tiny_config(output={"progress": "lines"})


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


@pytest.fixture(scope="module")
def one_group(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("one_group")
    done = run_cli("run", write_yaml(folder / "c.yaml", CONFIG), "--results", folder / "r")
    assert done.returncode == 0, done.stderr
    return only_run_dir(folder / "r")


def member_rows(run_dir: Path) -> pd.DataFrame:
    rows = pd.read_csv(run_dir / "losses.csv")
    return rows.sort_values(["model", "split", "metric", "step"]).reset_index(drop=True)


def assert_same_training(run_dir: Path, reference: Path) -> None:
    """Every member's rows (every value, bit for bit) and exported weights equal the reference's."""
    pd.testing.assert_frame_equal(member_rows(run_dir), member_rows(reference), check_exact=True)
    keras = import_keras()
    for name in ("fcn", "unet", "deconv"):
        a = keras.models.load_model(run_dir / "models" / name / "model.keras", compile=False).get_weights()
        b = keras.models.load_model(reference / "models" / name / "model.keras", compile=False).get_weights()
        assert all(np.array_equal(x, y) for x, y in zip(a, b)), name


def test_members_in_groups_train_bit_for_bit_as_in_one_group(one_group, tmp_path):
    config = tiny_config(placement={"max_members_per_group": 2}, output={"progress": "lines"})
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "r")
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "r")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed"
    assert [(g["name"], g["members"], g["status"]) for g in info["groups"]] == [("g1", ["fcn", "unet"], "completed"), ("g2", ["deconv"], "completed")]
    assert all(g["peak_rss_mb"] > 0 and g["device"] == "CPU" for g in info["groups"])
    assert_same_training(run_dir, one_group)
    # ONE comparison: every member ranked, every pair across groups, one TensorBoard folder each
    summary = pd.read_csv(run_dir / "summary.csv")
    assert sorted(summary["model"]) == ["deconv", "fcn", "unet"] and set(summary["status"]) == {"ok"}
    pairs = pd.read_csv(run_dir / "pairs.csv")
    assert len(pairs) == 3 and pairs["steps"].eq(8).all()
    assert sorted(p.name for p in (run_dir / "tb").iterdir()) == ["deconv", "fcn", "unet"]
    assert (run_dir / "report.html").exists() and (run_dir / "plan.json").exists()
    assert "group g2 (1 member(s): deconv) started on CPU" in done.stderr


def test_interrupted_groups_resume_and_only_unfinished_groups_run_again(one_group, tmp_path):
    config = tiny_config(placement={"max_members_per_group": 1}, output={"progress": "lines"})
    results = tmp_path / "r"
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", results)
    run_dir = wait_for_run_dir(results, process)
    assert run_dir is not None
    deadline = time.monotonic() + 120
    while not (run_dir / "groups" / "g2" / "losses.csv").exists():  # g1 (fcn) done, g2 (unet) training
        assert time.monotonic() < deadline and process.poll() is None, "g2 never started"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["groups"][0]["status"] == "completed"

    done = run_cli("resume", run_dir)
    assert done.returncode == 0, done.stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed"
    assert [g["attempts"] for g in info["groups"]][0] == 1  # the completed group was not run again
    assert all(g["status"] == "completed" for g in info["groups"])
    assert_same_training(run_dir, one_group)  # resumed groups: bit for bit too


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
        figures = {"model": name, "params": 1, "flops_per_example": 1, "peak_mb": mb, "ms_per_step": 1.0, "memory_from": "planted"}
        (cache / f"{cache_key(raw, 'cpu')}.json").write_text(json.dumps(figures))
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "r", env={"HARNESS_TEST_DEVICE_MB": "700"})
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "r")
    info = json.loads((run_dir / "run.json").read_text())
    groups = {g["name"]: g for g in info["groups"]}
    assert groups["g1"]["status"] == "split" and groups["g1"]["split_into"] == ["g1a", "g1b"]
    assert (groups["g1a"]["members"], groups["g1a"]["status"]) == (["deconv"], "oom")
    assert (groups["g1b"]["members"], groups["g1b"]["status"]) == (["fcn"], "completed")
    assert groups["g2"]["status"] == "completed"
    assert info["models"]["deconv"]["status"] == "oom" and info["models"]["fcn"]["status"] == "ok"
    assert "group g1 ran out of device memory: split into g1a (deconv) and g1b (fcn)" in done.stderr
    assert "deconv did not fit in device memory even alone (status oom)" in done.stderr
    summary = pd.read_csv(run_dir / "summary.csv").set_index("model")
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
    assert "group g1 on CPU" in first.stdout and "estimated training time" in first.stdout
    again = run_cli("plan", config, "--results", tmp_path / "r")
    assert again.returncode == 0 and again.stdout.count("(cached)") == 3
    assert "measuring" not in again.stderr
    import harness

    plan = harness.plan(config, results_dir=tmp_path / "r")  # the API: the same plan, from the cache
    assert [m["model"] for m in plan.models] == ["fcn", "unet", "deconv"] and all(m["cached"] for m in plan.models)
    assert [g.members for g in plan.groups] == [g["members"] for g in json.loads((tmp_path / "r" / "tiny" / "plan.json").read_text())["groups"]]


def test_nightly_runs_a_multi_group_experiment_and_its_retention_reaches_group_checkpoints(tmp_path):
    config = write_yaml(tmp_path / "c.yaml", tiny_config(placement={"max_members_per_group": 2}, output={"nightly": {"keep_checkpoints_of_runs": 1}}))
    first = harness_nightly(config, tmp_path / "r", "2026-11-19")
    assert first.exit_code == 0 and not first.regressions
    assert {"deconv val_iou", "fcn val_iou", "unet val_iou"} <= set(harness_history(tmp_path / "r"))
    assert len(list(first.run_dir.glob("groups/*/checkpoints"))) == 2
    second = harness_nightly(config, tmp_path / "r", "2026-11-20")
    assert second.exit_code == 0 and not second.regressions  # same code, same data, other groups' processes
    assert not list(first.run_dir.glob("groups/*/checkpoints")) and len(list(second.run_dir.glob("groups/*/checkpoints"))) == 2


def harness_nightly(config: Path, results: Path, night: str):
    import harness

    return harness.nightly(config, results_dir=results, night=night)


def harness_history(results: Path) -> list[str]:
    import harness

    return list(harness.history("tiny", results_dir=results).columns)
