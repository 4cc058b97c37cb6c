"""Fault trials on the cluster: a Ray head that does not answer, a local Ray instance that times
out while starting. Either is exit 4 (resources) naming what was tried and what to check, and
leaves no run folder (or a run folder as it was)."""

from __future__ import annotations

import json

import pytest
from conftest import run_dirs, run_main, tiny_config, write_yaml

ray = pytest.importorskip("ray")

STARTUP_TIMEOUT = ("The current node timed out during startup. This could happen because some of the Ray processes "
                   "failed to startup.")


def groups_config(tmp_path, **ray_settings):
    raw = tiny_config(placement={"engine": "ray", "max_members_per_group": 2, "ray": ray_settings})
    return write_yaml(tmp_path / "c.yaml", raw)


def test_a_head_node_that_does_not_answer_is_exit_4_and_leaves_no_run_folder(tmp_path):
    done = run_main("run", groups_config(tmp_path, address="127.0.0.1:9"), "--results", tmp_path / "r")
    assert done.returncode == 4, done.stderr
    assert "could not start or join a Ray cluster at 127.0.0.1:9" in done.stderr and "ray status" in done.stderr
    assert "RAY_ADDRESS" in done.stderr and "bug" not in done.stderr
    assert run_dirs(tmp_path / "r") == []


def test_a_local_instance_that_times_out_while_starting_is_exit_4_not_a_bug(tmp_path, monkeypatch):
    def slow_start(*args, **kwargs):
        raise RuntimeError(STARTUP_TIMEOUT)

    monkeypatch.setattr(ray, "init", slow_start)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    done = run_main("run", groups_config(tmp_path), "--results", tmp_path / "r")
    assert done.returncode == 4, done.stderr
    assert "timed out during startup" in done.stderr and "a new local Ray instance" in done.stderr
    assert "This is a bug" not in done.stderr
    assert run_dirs(tmp_path / "r") == []


def test_resuming_while_the_cluster_is_down_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    from harness.config.loading import load_config
    from harness.rundir import RunRecord, RunStatus, create_run_dir

    config = load_config(groups_config(tmp_path))
    run = create_run_dir(config, tmp_path / "r")
    groups = [{"name": "g1", "models": ["fcn", "unet"], "members": ["fcn", "unet"], "status": "interrupted"},
              {"name": "g2", "models": ["deconv"], "members": ["deconv"], "status": "pending"}]
    run.write_record(RunRecord(name="tiny", run_id=run.run_id, status=RunStatus.INTERRUPTED, config=config.to_dict(),
                               config_fingerprint=config.fingerprint(), total_steps=config.total_steps, groups=groups))
    before = run.run_json.read_bytes()
    monkeypatch.setattr(ray, "init", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("GCS unreachable")))
    done = run_main("resume", run.path)
    assert done.returncode == 4, done.stderr
    assert run.run_json.read_bytes() == before, "run.json says interrupted still: resume again once Ray is up"
    assert json.loads(before)["status"] == "interrupted"
