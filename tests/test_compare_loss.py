"""Validation on the common loss: members that train on different losses are also scored on one
loss they share (`val_compare_loss`), which ranks and charts them; a ranking by their own losses
is warned about."""

from __future__ import annotations

import re

import pytest
from conftest import run_main, tiny_config, write_yaml

from harness.rundir import read_csv


@pytest.fixture(scope="module")
def mixed_losses(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare_loss")
    raw = tiny_config(train={"epochs": 1, "steps_per_call": 2, "deterministic": True}, output={"probe_steps": 0, "progress": "none", "rank_by": "val_loss", "serve_probe": False})
    result = run_main("run", write_yaml(folder / "c.yaml", raw), "--results", folder / "r")
    assert result.returncode == 0, result.stderr
    (run_dir,) = (folder / "r" / "tiny").iterdir()
    return result, run_dir


def test_every_member_is_scored_on_the_common_loss_and_its_own(mixed_losses):
    _, run_dir = mixed_losses
    summary = read_csv(run_dir / "summary.csv").set_index("model")
    same = summary.loc[["fcn", "unet"]]  # trained on bce+dice, the common loss: the same numbers
    assert (same["val_compare_loss"] - same["val_loss"]).abs().max() < 1e-9
    deconv = summary.loc["deconv"]  # trained on focal+dice: scored on bce+dice apart
    assert abs(deconv["val_compare_loss"] - deconv["val_loss"]) > 1e-3
    per_image = read_csv(run_dir / "val_scores.csv")
    last = per_image[per_image["step"] == per_image["step"].max()].groupby("model")["compare_loss"].mean()
    assert last.to_dict() == pytest.approx(summary["val_compare_loss"].to_dict(), rel=1e-6)


def test_a_ranking_by_own_losses_is_warned_and_the_common_loss_can_rank(mixed_losses, tmp_path):
    result, run_dir = mixed_losses
    assert "the ranking is by val_loss, each member's own loss, but they train on different losses" in result.stderr
    assert "--set output.rank_by=val_compare_loss" in result.stderr
    val_charts = (run_dir / "report.html").read_text()
    titles = set(re.findall(r"validation ([a-z0-9_ ()+]+?) *<", val_charts))
    assert {"iou", "f1", "common loss (bce+dice)"} <= titles and "loss" not in titles, titles
    raw = tiny_config(output={"rank_by": "val_compare_loss"})
    from harness.config.loading import validate_config

    assert validate_config(raw).ranking_column() == "val_compare_loss"
    same_loss = tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet"}], output={"rank_by": "val_compare_loss"})
    assert validate_config(same_loss).ranking_column() == "val_loss"  # one loss for all: the same numbers
