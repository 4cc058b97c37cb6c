"""TensorFlow's C++ log level (harness/core/backend.py): harness's default, which drops the start-up
lines while TensorFlow loads, is told apart from a level the user chose, in the process that set
it and in every process that inherits its environment (a group's process, a Ray worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

KEYS = ("TF_CPP_MIN_LOG_LEVEL", "HARNESS_TF_LOG_LEVEL_DEFAULTED")
PROBE = (
    "import json, harness.core.backend as b; "
    "print(json.dumps({'user': b._USER_LOG_LEVEL, 'passed_on': {k: b.user_environment().get(k) for k in %r}}))" % (KEYS,)
)


def level_seen(env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in KEYS}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "env, user, passed_on",
    [
        ({}, False, {}),  # no level: harness's default, not passed on
        ({"TF_CPP_MIN_LOG_LEVEL": "0"}, True, {"TF_CPP_MIN_LOG_LEVEL": "0"}),  # the user's: kept
        # inherited from a harness process (a group's, a local Ray instance's worker): still harness's
        ({"TF_CPP_MIN_LOG_LEVEL": "2", "HARNESS_TF_LOG_LEVEL_DEFAULTED": "1"}, False, {}),
    ],
)
def test_a_log_level_harness_chose_is_not_passed_on_as_the_users(env, user, passed_on):
    seen = level_seen(env)
    assert seen["user"] is user
    assert {k: v for k, v in seen["passed_on"].items() if v is not None} == passed_on


@pytest.mark.parametrize(
    "environ, memory_mb, chosen",
    [
        ({}, 24_000, {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),  # TensorFlow's 64 GB cap is above the machine's memory: kept
        ({}, None, {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),  # memory unknown: TensorFlow's cap
        ({}, 256_000, {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPU_BFC_MEM_LIMIT_IN_MB": "256000"}),  # never below the machine's
        ({"TF_CPU_ALLOCATOR_USE_BFC": "false"}, 24_000, {}),  # the user's choice: kept
        ({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "1000"}, 256_000, {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),  # the user's cap: kept
    ],
)
def test_the_cpu_allocator_is_tensorflows_bfc_unless_the_user_chose(environ, memory_mb, chosen):
    from harness.core.backend import cpu_allocator_choice

    assert cpu_allocator_choice(environ, memory_mb) == chosen


def allocator_seen(env: dict[str, str], first: str = "from harness.core.backend import import_tf; tf = import_tf()") -> dict:
    """What a fresh process that imports TensorFlow through harness (or as `first` does) reads of
    the CPU's allocator around a 16 MB tensor, or the error that says it keeps no statistics."""
    probe = (
        f"import json; {first}; memory = tf.config.experimental\n"
        "try:\n"
        "    memory.reset_memory_stats('CPU:0'); x = tf.zeros((1024, 1024, 4)); print(json.dumps(memory.get_memory_info('CPU:0')))\n"
        "except ValueError as error:\n"
        "    print(json.dumps({'error': str(error)}))"
    )
    clean = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    done = subprocess.run([sys.executable, "-c", probe], env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_cpus_allocator_keeps_the_peak_the_serving_probe_reads():
    """Without the BFC allocator, on a CPU where TensorFlow leaves oneDNN off (an AMD EPYC with AVX2
    and no AVX-512), TensorFlow said "Allocator stats not available for device 'CPU:0'" and the
    serving probe read the resident set instead (tests/test_serve.py's peak test failed there)."""
    seen = allocator_seen({})
    assert seen.get("peak", 0) >= 16 * 2**20, seen
    # docs/api.md: TensorFlow imported first is fine, as long as it made no tensor before harness came
    legacy = {"TF_USE_LEGACY_KERAS": "1", "SM_FRAMEWORK": "tf.keras"}
    assert allocator_seen(legacy, "import tensorflow as tf; import harness").get("peak", 0) >= 16 * 2**20


@pytest.mark.parametrize("asked, said", [("1", True), ("0", False)])
def test_whether_the_cpus_kernels_are_onednns_is_read_as_tensorflow_chose(asked, said):
    """run.json's `hardware.onednn` and the doctor's CPU line: TF_ENABLE_ONEDNN_OPTS turns oneDNN on
    or off whatever the CPU (unset, TensorFlow chooses by the CPU's instruction sets)."""
    probe = "from harness.core.backend import onednn_enabled; print(onednn_enabled())"
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": asked}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(said)


def test_child_processes_import_from_the_folders_this_process_does(tmp_path, monkeypatch):
    """A script's own folder (mymodels.py beside it) is on its sys.path but not on that of a plan's
    probe or a group's process started from another folder: "No module named 'mymodels'"."""
    from harness.core.backend import code_path, user_environment

    script_folder, elsewhere = tmp_path / "scripts", tmp_path / "elsewhere"
    script_folder.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [str(script_folder), "", os.path.dirname(os.__file__), str(tmp_path / "gone")])
    assert code_path() == {"PYTHONPATH": os.pathsep.join([str(script_folder), str(elsewhere)])}  # not the standard library's, not a folder that is gone
    assert user_environment()["PYTHONPATH"] == code_path()["PYTHONPATH"]


@pytest.mark.subprocess
def test_a_plan_from_a_script_in_another_folder_probes_the_scripts_factory(tmp_path, monkeypatch):
    import harness
    from conftest import REPO, tiny_config

    script_folder, elsewhere = tmp_path / "scripts", tmp_path / "elsewhere"
    script_folder.mkdir(), elsewhere.mkdir()
    (script_folder / "beside_the_script.py").write_text((REPO / "tests" / "factories.py").read_text())
    monkeypatch.syspath_prepend(str(script_folder))  # as `python scripts/plan.py` puts it
    monkeypatch.chdir(elsewhere)
    config = tiny_config(models=[{"name": "mine", "arch": "beside_the_script:small_convnet", "options": {"width": 3}}])
    plan = harness.plan(config, results_dir=tmp_path / "r")
    assert plan.models[0]["params"] == 3 * 3 * 3 * 3 + 3 + 3 * 1 + 1
