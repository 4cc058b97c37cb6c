"""Fault trials on tracking: an MLflow server that is not there. The run completes with one
warning, sends nothing more once tracking failed, and the command returns (no minutes of retries
after the run says completed)."""

from __future__ import annotations

import json

import pytest
from conftest import only_run_dir, run_cli, tiny_config, write_yaml

pytest.importorskip("mlflow")


def test_a_tracking_server_on_a_closed_port_costs_one_warning_and_no_wait(tmp_path):
    raw = tiny_config(train={"epochs": 1}, output={"probe_steps": 0, "progress": "none", "mlflow": {"tracking_uri": "http://127.0.0.1:9", "timeout_s": 2}})
    # MLflow's own retries held such a process for minutes after its results were written: the
    # subprocess timeout is what would catch that here.
    done = run_cli("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r", timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("MLflow logging stopped") == 1 and "nothing logged at the end either" in done.stderr
    info = json.loads((only_run_dir(tmp_path / "r") / "run.json").read_text())
    assert info["status"] == "completed" and info["mlflow"]["stopped"] == "while training" and info["mlflow"]["error"]
