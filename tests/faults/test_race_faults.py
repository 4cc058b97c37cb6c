"""Fault trial on a race: SIGKILL the moment a rung is decided (run.json records the cut before
that step's checkpoint), resume, and compare with the uninterrupted race bit for bit."""

from __future__ import annotations

import json
import signal
import time

import pandas as pd
import pytest
from conftest import only_run_dir, run_cli, start_cli, tiny_config, wait_for_run_dir, write_yaml

from harness.rundir import read_csv

pytestmark = pytest.mark.slow

MODELS = [
    {"name": "fcn", "arch": "tiny_fcn"},
    {"name": "unet", "arch": "tiny_unet"},
    {"name": "wide", "arch": "tiny_fcn", "options": {"width": 12}},
    {"name": "deconv", "arch": "tiny_deconv", "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9}},  # one loss: a race by val_loss
]
CONFIG = tiny_config(models=MODELS, train={"epochs": 3, "steps_per_call": 1, "race": {"rungs": [1, 2], "keep": 0.5, "metric": "val_loss"}},
                     output={"probe_steps": 0, "progress": "lines"})


def rungs_decided(run_dir) -> int:
    try:
        return len((json.loads((run_dir / "run.json").read_text()).get("race") or {}).get("rungs", []))
    except (OSError, ValueError):
        return 0  # being replaced: read again


def test_a_race_killed_at_a_rung_boundary_resumes_to_the_uninterrupted_race(tmp_path):
    done = run_cli("run", write_yaml(tmp_path / "u.yaml", CONFIG), "--results", tmp_path / "u")
    assert done.returncode == 0, done.stderr
    uninterrupted = only_run_dir(tmp_path / "u")
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", CONFIG), "--results", tmp_path / "r")
    run_dir = wait_for_run_dir(tmp_path / "r", process)
    deadline = time.monotonic() + 300
    while rungs_decided(run_dir) < 1:
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first rung was seen"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)  # at the rung: decided and recorded, the checkpoint not yet written or just written
    process.communicate(timeout=60)
    resumed = run_cli("resume", run_dir)
    assert resumed.returncode == 0, resumed.stderr
    info, expected = json.loads((run_dir / "run.json").read_text()), json.loads((uninterrupted / "run.json").read_text())
    assert [r["dropped"] for r in info["race"]["rungs"]] == [r["dropped"] for r in expected["race"]["rungs"]]
    order = ["model", "step", "split", "metric"]
    got = read_csv(run_dir / "losses.csv").sort_values(order).reset_index(drop=True)
    want = read_csv(uninterrupted / "losses.csv").sort_values(order).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
