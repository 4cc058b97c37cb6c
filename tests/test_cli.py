"""The real CLI, in subprocesses, as users and cron jobs run it."""

from __future__ import annotations

import json

import pandas as pd
from conftest import REPO, run_cli, tiny_config, write_yaml


def test_smoke_experiment_end_to_end(tmp_path):
    result = run_cli("run", REPO / "experiments" / "smoke.yaml", "--results", tmp_path, "--set", "train.epochs=2")
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "smoke").iterdir()
    assert f"results: {run_dir}" in result.stdout
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["steps_done"] == 16 and info["trace_count"] == 1
    assert info["timing"]["fused_ms_per_step"] > 0
    summary = pd.read_csv(run_dir / "summary.csv")
    assert sorted(summary["model"]) == ["deconv", "fcn", "unet"]
    assert (summary["ms_per_step"] > 0).all()
    losses = pd.read_csv(run_dir / "losses.csv")
    assert not losses.duplicated(["model", "split", "metric", "step"]).any()
    assert "step 16/16" in result.stderr and "loss: fcn" in result.stderr  # progress lines in a log
    assert "cuInit" not in result.stderr and "oneDNN" not in result.stderr  # TF start-up noise hidden
    assert (run_dir / "config.yaml").read_text().count("epochs: 2") == 1


def test_user_factory_from_config(tmp_path):
    raw = tiny_config(models=[{"name": "mine", "arch": "factories:small_convnet", "options": {"width": 3}}])
    result = run_cli("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r", env={"PYTHONPATH": str(REPO / "tests")})
    assert result.returncode == 0, result.stderr
    summary = pd.read_csv(next((tmp_path / "r" / "tiny").glob("*/summary.csv")))
    assert summary.loc[0, "params"] == 3 * 3 * 3 * 3 + 3 + 3 * 1 + 1


def test_user_factory_size_rule_is_checked(tmp_path):
    raw = tiny_config(models=[{"name": "mine", "arch": "factories:small_convnet"}], data={"image_size": 15})
    result = run_cli("run", write_yaml(tmp_path / "c.yaml", raw), env={"PYTHONPATH": str(REPO / "tests")})
    assert result.returncode == 2 and "multiple of 2" in result.stderr and "16x16" in result.stderr


def test_models_lists_architectures_and_backbones():
    result = run_cli("models")
    assert result.returncode == 0, result.stderr
    for name in ("Unet", "Linknet", "FPN", "PSPNet", "tiny_unet", "resnet18", "efficientnetb0", "package.module:function"):
        assert name in result.stdout


def test_help_for_every_command():
    assert "run" in run_cli("--help").stdout
    for command in ("run", "models"):
        result = run_cli(command, "--help")
        assert result.returncode == 0 and "usage" in result.stdout


def test_no_command_is_a_usage_error():
    assert run_cli().returncode == 2
