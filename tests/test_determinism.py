"""Deterministic runs in a process that did other TensorFlow work first (the API in a notebook):
the input pipeline keeps Grappler's setting from the runtime's start, and the run says so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import cli_environment, tiny_config

from harness.core import placement


@pytest.fixture
def runtime(monkeypatch):
    """A fake runtime: started or not, and Grappler's setting of the moment."""
    state = {"started": False, "options": {}}
    monkeypatch.setattr(placement, "_grappler_at_start", None)
    monkeypatch.setattr(placement, "_runtime_started", lambda: state["started"])
    monkeypatch.setattr(placement.tf.config.optimizer, "get_experimental_options", lambda: dict(state["options"]))
    return state


def test_a_runtime_started_with_grappler_on_warns_a_deterministic_run_only(runtime):
    runtime["started"] = True  # started by other work, with Grappler's default (on)
    assert placement._grappler_when_runtime_started() is True
    runtime["options"] = {"disable_meta_optimizer": True}  # switched off since: too late for the input pipeline
    assert "Grappler on" in placement.input_pipeline_warning(True)
    assert placement.input_pipeline_warning(False) is None  # a fast run promises no bit-for-bit rows


def test_a_runtime_started_after_harness_switched_grappler_off_does_not_warn(runtime):
    assert placement.input_pipeline_warning(True) is None  # not started yet: it starts with harness's setting
    runtime["options"] = {"disable_meta_optimizer": True}
    runtime["started"] = True
    assert placement.input_pipeline_warning(True) is None
    runtime["options"] = {"disable_meta_optimizer": False}  # a fast run after it: the start is what counts
    assert placement.input_pipeline_warning(True) is None


RUN_IN_A_FRESH_PROCESS = """
import hashlib, json, sys
import harness
from harness.core.backend import import_tf
from harness.config.loading import validate_config

if sys.argv[1] == "after_other_work":
    tf = import_tf()
    tf.function(lambda x: x * 2.0 + 1.0)(tf.ones((2,)))  # the user's own TensorFlow, Grappler on
result = harness.run(validate_config(json.loads(sys.argv[2])), results_dir=sys.argv[3])
print(json.dumps({"warnings": result.info["warnings"], "losses": hashlib.md5((result.run_dir / "losses.csv").read_bytes()).hexdigest()}))
"""


def test_a_deterministic_run_after_other_tensorflow_work_says_it_is_not_the_command_lines(tmp_path):
    config = json.dumps(tiny_config(models=tiny_config()["models"][:1]))
    said = {}
    for order in ("first", "after_other_work"):
        done = subprocess.run([sys.executable, "-c", RUN_IN_A_FRESH_PROCESS, order, config, str(tmp_path / order)],
                              capture_output=True, text=True, timeout=300, env=cli_environment(None))
        assert done.returncode == 0, done.stderr[-3000:]
        said[order] = json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}
    assert not [w for w in said["first"]["warnings"] if "input pipeline" in w]
    assert "input pipeline" not in said["first"]["stderr"]
    assert [w for w in said["after_other_work"]["warnings"] if "Grappler on" in w]
    assert "harness: warning: train.deterministic: TensorFlow's runtime started in this process with Grappler on" in said["after_other_work"]["stderr"]
    # What the warning is for: the rows are not the fresh process's (if TensorFlow ever gives
    # tf.data functions the setting of the moment, this fails and the warning should go).
    assert said["after_other_work"]["losses"] != said["first"]["losses"]
