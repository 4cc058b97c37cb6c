"""The end-of-run step-time probe: each member alone in the run's own compiled loop (by its switch,
no new trace, every variable put back), and, over several replicas, each member's step traced alone."""

from __future__ import annotations

import numpy as np

from conftest import tiny_config
from harness.config.loading import validate_config
from harness.training.actions import probe_step_times
from harness.training.entry import run_experiment

SMALL_AND_BIG = [
    {"name": "small", "arch": "tiny_fcn", "options": {"width": 2, "batchnorm": False}},
    {"name": "big", "arch": "tiny_unet", "options": {"width": 48}},
]


def _state(done) -> dict:
    return {
        "weights": [v.numpy().copy() for m in done.members for v in m.state_variables()],
        "switches": {name: bool(s.numpy()) for name, s in (done.switches or {}).items()},
        "global_step": int(done.global_step.numpy()),
        "traces": done.train_loop.tracing_count(),
    }


def _probe_and_watch(seen: dict):
    def probe(done):
        seen["before"] = _state(done)
        probe_step_times(done)
        seen["after"] = _state(done)
        seen["ms"] = {name: record.ms_per_step for name, record in done.records.items()}

    return probe


def test_each_member_is_timed_alone_in_the_runs_own_loop_without_a_new_trace_and_left_unchanged(tmp_path):
    seen: dict = {}
    config = validate_config(tiny_config(data={"image_size": [32, 32]}, models=SMALL_AND_BIG, output={"probe_steps": 3}))
    run_experiment(config, tmp_path, end_of_run=(_probe_and_watch(seen),))
    before, after = seen["before"], seen["after"]
    assert set(before["switches"]) == {"small", "big"} and all(before["switches"].values())
    assert after["traces"] == before["traces"] == 1  # the run's one trace, reused
    assert after["switches"] == before["switches"] and after["global_step"] == before["global_step"]
    assert all(np.array_equal(a, b) for a, b in zip(before["weights"], after["weights"]))
    # Alone, the 48-wide U-Net costs many times the 2-wide FCN: the probe times each member, not the step.
    assert seen["ms"]["big"] > 3 * seen["ms"]["small"] > 0, seen["ms"]


def test_over_several_replicas_each_members_step_is_traced_alone(tmp_path):
    seen: dict = {}
    config = validate_config(tiny_config(models=SMALL_AND_BIG[:1] + [{"name": "fcn", "arch": "tiny_fcn"}],
                                         placement={"strategy": "mirrored", "logical_cpus": 2}, output={"probe_steps": 2}))
    run_experiment(config, tmp_path, end_of_run=(_probe_and_watch(seen),))
    assert seen["before"]["switches"] == {}  # a switch around a cross-replica sum would be a sync point in control flow
    assert all(ms > 0 for ms in seen["ms"].values()) and set(seen["ms"]) == {"small", "fcn"}
    assert all(np.array_equal(a, b) for a, b in zip(seen["before"]["weights"], seen["after"]["weights"]))
