"""Fault trials on runs of several groups (each group a process of its own): the driver killed
with SIGKILL in the middle of a group, after that group's first checkpoint; a group's worker
killed with SIGKILL. Each is resumed and compared with the same members trained in one fused step,
bit for bit, and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import assert_same_training, run_cli, start_cli, tiny_config, wait_for_run_dir, write_yaml

pytestmark = pytest.mark.slow

# 3 models in groups of 2; 6 epochs of 4 steps, a checkpoint every 2 steps, one step per call.
CONFIG = tiny_config(placement={"max_members_per_group": 2}, output={"progress": "lines"},
                     train={"epochs": 2, "steps_per_call": 1, "checkpoint_every_steps": 2})


def wait_for(condition, process, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and process.poll() is None, f"never: {what}"
        time.sleep(0.05)


def first_checkpoint_of(group_dir):
    return lambda: any((group_dir / "checkpoints").glob("ckpt-*.index")) if (group_dir / "checkpoints").is_dir() else False


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc (no pgrep needed)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while listed
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def group_workers_of(pid: int) -> list[int]:
    """The children of `pid` that train a group (the others are its output processes)."""
    found = []
    for child in children_of(pid):
        try:
            if b"harness.scale.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = open(f"/proc/{pid}/status").read() if os.path.exists(f"/proc/{pid}/status") else ""
    return "zombie" not in status


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    done = run_cli("run", write_yaml(folder / "c.yaml", {**CONFIG, "placement": {"grouping": "single"}}), "--results", folder / "r")
    assert done.returncode == 0, done.stderr
    (run_dir,) = (folder / "r" / "tiny").glob("2*")
    return run_dir


def test_the_driver_killed_in_the_middle_of_a_group_resumes_to_the_same_result(reference, tmp_path):
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", CONFIG), "--results", tmp_path / "r", env={"HARNESS_OUTPUT_PROCESSES": "2"})
    run_dir = wait_for_run_dir(tmp_path / "r", process)
    wait_for(first_checkpoint_of(run_dir / "groups" / "g1"), process, "g1's first checkpoint")
    workers = children_of(process.pid)  # the group's worker and the output processes: none may outlive it
    assert len(group_workers_of(process.pid)) == 1 and len(workers) >= 3  # (and multiprocessing's resource tracker)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    deadline = time.monotonic() + 60  # a worker whose driver died stops by itself (it watches its parent)
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(w) for w in workers), "a group's worker outlived its killed driver"
    done = run_cli("resume", run_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert_same_training(run_dir, reference)


def test_a_groups_worker_killed_fails_its_group_and_resume_finishes_it_the_same(reference, tmp_path):
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", CONFIG), "--results", tmp_path / "r")
    run_dir = wait_for_run_dir(tmp_path / "r", process)
    wait_for(first_checkpoint_of(run_dir / "groups" / "g1"), process, "g1's first checkpoint")
    (worker,) = group_workers_of(process.pid)
    os.kill(worker, signal.SIGKILL)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode != 0 and "Traceback" not in stderr
    assert "harness resume" in stderr, stderr
    done = run_cli("resume", run_dir)
    assert done.returncode == 0, done.stderr
    assert_same_training(run_dir, reference)
