"""Early stopping per member: the rule, and a run where a member that stops improving is frozen
while the others train on exactly as they would have."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import tiny_config

import harness
from harness.config.loading import validate_config
from harness.training.early_stopping import should_stop


@pytest.mark.parametrize(
    "values, patience, min_delta, higher, expected",
    [
        ([0.1, 0.2, 0.3], 1, 0.0, True, False),  # still improving
        ([0.1, 0.3, 0.3], 1, 0.0, True, True),  # equal is no improvement
        ([0.1, 0.3, 0.305], 1, 0.01, True, True),  # an improvement smaller than min_delta
        ([0.3, 0.2, 0.25], 2, 0.0, True, True),  # two evaluations below the best before them
        ([0.3, 0.2, 0.31], 2, 0.0, True, False),
        ([1.0, 0.9, 0.95], 1, 0.0, False, True),  # losses: lower is better
        ([0.5], 1, 0.0, True, False),  # nothing to compare with yet
    ],
)
def test_the_rule_counts_evaluations_without_improvement(values, patience, min_delta, higher, expected):
    assert should_stop(values, patience, min_delta, higher) is expected


def run(tmp_path, **train):
    raw = tiny_config(train={"epochs": 4, **train}, output={"probe_steps": 0, "progress": "none"})
    return harness.run(validate_config(raw), results_dir=tmp_path)


@pytest.mark.slow
def test_a_member_that_stops_improving_is_frozen_and_the_others_are_unchanged(tmp_path):
    plain = run(tmp_path / "plain")
    stopping = run(tmp_path / "stopping", early_stopping={"metric": "val_iou", "patience": 1, "min_delta": 0.0})
    models = stopping.info["models"]
    stopped = {name: m["changed_at_step"] for name, m in models.items() if m["status"] == "stopped"}
    assert "deconv" in stopped  # its IoU stays 0: no improvement after its first evaluation
    assert stopped["deconv"] == 8  # the second evaluation (4 steps per epoch)
    rows, reference = stopping.losses, plain.losses
    for name in ("fcn", "unet", "deconv"):
        last = stopped.get(name, 16)
        mine = rows[rows["model"] == name].sort_values(["step", "split", "metric"]).reset_index(drop=True)
        theirs = reference[(reference["model"] == name) & (reference["step"] <= last)].sort_values(["step", "split", "metric"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True)  # the same up to its stop, nothing after
    # Its validation rows came from the eval function reading the switches; the plain run's did
    # not; both traced it once (a member that stops leaves it by its switch).
    assert stopping.info["eval_trace_count"] == 1 and plain.info["eval_trace_count"] == 1
    summary = stopping.summary.set_index("model")
    assert summary.loc["deconv", "status"] == "stopped" and summary.loc["deconv", "steps"] == 8
    best = json.loads((stopping.run_dir / "models" / "deconv" / "best.json").read_text())
    assert set(best) == {"step", "val_iou"}  # best.keras is the best state by the stopping metric
    if len(stopped) == 3:
        assert stopping.info["steps_done"] == max(stopped.values()) < 16  # the run ends when every member has
    else:
        assert stopping.info["steps_done"] == 16 and stopping.info["status"] == "completed"
