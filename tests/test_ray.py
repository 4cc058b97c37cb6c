"""Ray as the engine beyond one machine: groups as Ray tasks on a local instance (logical GPUs
declared, so the GPU path is scheduled) and on a two-node cluster that loses a node while one of
its groups runs. The driver runs in this process; every group runs in a fresh process, so results
compare bit for bit with a run the real CLI made."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_same_training, tiny_config, write_yaml

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import harness  # noqa: E402

SMALL_STORE = 80 * 2**20  # Ray's object store: these tests pass no objects through it


def ray_config(tmp_path: Path, **placement) -> Path:
    config = tiny_config(placement={"engine": "ray", "max_members_per_group": 2, **placement}, output={"progress": "lines"})
    return write_yaml(tmp_path / "c.yaml", config)


def test_groups_run_as_ray_tasks_on_logical_gpus(one_group, tmp_path):
    # address="local": a new instance of its own, whatever other Ray instance this machine runs
    ray.init(address="local", num_cpus=2, num_gpus=2, object_store_memory=SMALL_STORE, include_dashboard=False)
    try:
        result = harness.run(ray_config(tmp_path), results_dir=tmp_path / "r")
    finally:
        ray.shutdown()
    groups = result.info["groups"]
    assert result.info["status"] == "completed" and len(groups) == 2
    assert all(g["status"] == "completed" and g["device"] == "ray (a GPU)" for g in groups)
    assert result.info["hardware"]["cpus"] and all(g["hardware"] == result.info["hardware"] for g in groups)  # whose timings: the groups' machine
    assert_same_training(result.run_dir, one_group)


def test_a_node_lost_while_its_group_runs_is_retried_elsewhere_and_the_comparison_completes(one_group, tmp_path):
    # The head takes no tasks: every group lands on the node that is then lost, and its retry
    # has to go to the node added after it.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": SMALL_STORE})
    doomed = cluster.add_node(num_cpus=1, object_store_memory=SMALL_STORE)
    ray.init(address=cluster.address)
    outcome: dict = {}

    def drive():
        try:
            outcome["result"] = harness.run(ray_config(tmp_path), results_dir=tmp_path / "r")
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            outcome["error"] = exc

    driver = threading.Thread(target=drive)
    try:
        driver.start()
        deadline = time.monotonic() + 180
        # g1's process has started its run (it then builds and traces for seconds): lose its node
        while not list((tmp_path / "r").glob("tiny/*/groups/g1/run.json")):
            assert time.monotonic() < deadline and driver.is_alive(), f"g1 never started: {outcome}"
            time.sleep(0.05)
        cluster.remove_node(doomed, allow_graceful=False)
        cluster.add_node(num_cpus=1, object_store_memory=SMALL_STORE)
        driver.join(timeout=400)
        assert not driver.is_alive(), "the run did not finish after the node was lost"
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.info["status"] == "completed"
    assert all(g["status"] == "completed" for g in result.info["groups"])
    g1 = json.loads((result.run_dir / "groups" / "g1" / "run.json").read_text())
    assert g1["resumes"], "g1 should have been started again after its node was lost"
    assert_same_training(result.run_dir, one_group)
