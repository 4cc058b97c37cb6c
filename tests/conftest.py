"""Shared test helpers. harness is imported first so tf_keras is selected before TensorFlow."""

from __future__ import annotations

import atexit
import copy
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import file_seconds
import harness  # noqa: F401  (selects legacy Keras before anything imports TensorFlow)
import numpy as np
import pandas as pd
import pytest
import yaml
from harness.core.backend import import_tf, user_environment
from harness.rundir import read_csv

# Multi-device code is tested on two logical CPU devices, which must exist before TensorFlow
# initialises; every in-process test shares them (one_device runs use /cpu:0).
_tf = import_tf()
_tf.config.set_logical_device_configuration(
    _tf.config.list_physical_devices("CPU")[0], [_tf.config.LogicalDeviceConfiguration()] * 2
)

REPO = Path(__file__).resolve().parents[1]


def page_blocks(page: str | Path, language: str) -> list[str]:
    """The ```language blocks of a page of the repository (README.md, docs/x.md), in order: the
    code the docs show, for the tests that run or check it as written."""
    import re

    return re.findall(rf"```{language}\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), flags=re.S)

TINY_CONFIG = {
    "name": "tiny",
    "seed": 3,
    "data": {"image_size": [16, 16], "train_size": 16, "val_size": 8, "batch_size": 4},
    "models": [
        {"name": "fcn", "arch": "tiny_fcn"},
        {"name": "unet", "arch": "tiny_unet"},
        {"name": "deconv", "arch": "tiny_deconv", "loss": "focal+dice", "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9}},
    ],
    "train": {"epochs": 2, "steps_per_call": 3, "deterministic": True},
    # No serving probe (0.7 s a run, a tenth of the suite's run time): tests/test_serve.py turns it
    # on. No plots (3.8 s of CPU a run, more than its training): the tests of plots ask for PNG.
    "output": {"probe_steps": 0, "progress": "none", "serve_probe": False, "plot_formats": []},
}


def tiny_config(**changes) -> dict:
    """A deep copy of TINY_CONFIG with top-level sections replaced or updated."""
    config = copy.deepcopy(TINY_CONFIG)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    return config


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------------------------------------
# Test tiers. A test that starts a process (the real CLI, a Python script, a browser) is marked
# `subprocess` at collection, by what its code (and its fixtures' and helpers') calls: the fast
# tier, `pytest -m "not subprocess and not slow"`, leaves it out. The CLI helpers check the marker
# when called, so a test that reaches them some other way fails instead of slowing the fast tier.

SPAWNING = frozenset({"run_cli", "start_cli"})
STARTS = frozenset({"run", "Popen", "call", "check_call", "check_output"})  # subprocess.<these> start a process
_current_test: list = []


def _calls(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _calls(const)
    return names


def spawns(function, seen: set | None = None) -> bool:
    """Whether `function`, or a helper or fixture of the tests it calls, starts a process."""
    seen = seen if seen is not None else set()
    code = getattr(function, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    names = _calls(code)
    if names & SPAWNING or ("subprocess" in names and names & STARTS):
        return True
    helpers = (function.__globals__.get(n) for n in names)
    return any(spawns(h, seen) for h in helpers if _is_test_helper(h))


def _is_test_helper(thing) -> bool:
    """A function of the tests' own modules (harness's code never starts a test's process)."""
    module = getattr(thing, "__module__", None) or ""
    return callable(thing) and module.startswith(("test_", "conftest", "factories", "pictures", "reference", "custom_kinds"))


def trains_runs(fixture_function):
    """Marks a fixture that trains several runs (tens of seconds): every test that uses it is
    `slow`, however quick its own body. Under the fixture decorator: `@pytest.fixture(...)` then
    `@trains_runs`."""
    fixture_function.trains_runs = True
    return fixture_function


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        functions = [getattr(item, "function", None)]
        if fixtures is not None:
            functions += [defs[-1].func for defs in fixtures.name2fixturedefs.values() if defs]
        if any(spawns(f) for f in functions if f is not None):
            item.add_marker(pytest.mark.subprocess)
        if any(getattr(f, "trains_runs", False) for f in functions[1:]):
            item.add_marker(pytest.mark.slow)
    items[:] = file_seconds.longest_first(items, file_seconds.load())


@pytest.fixture(autouse=True)
def _tier_guard(request):
    _current_test.append(request.node)
    yield
    _current_test.pop()


def _check_tier(helper: str) -> None:
    if _current_test and _current_test[-1].get_closest_marker("subprocess") is None:
        raise AssertionError(f"{_current_test[-1].nodeid} calls {helper} but is not marked subprocess: "
                             "call it from the test or a fixture, where collection can see it")


def cli_environment(env: dict | None) -> dict:
    """A user's environment: without the variables `import harness` set in this test process, and
    with the outputs written in the command's own process (HARNESS_OUTPUT_PROCESSES=0) unless the
    test says otherwise. Output processes load their libraries on a core a user's run leaves idle;
    the suite's two workers leave none, so there each command would pay about 5 CPU-seconds of
    imports for nothing (test_cli.py: 42 s against 36 s). tests/test_output_pool.py and the
    benches run the CLI with them; the files are the same to the byte either way (tested)."""
    inherited = {k: v for k, v in user_environment().items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS", "SM_FRAMEWORK")}
    return {**inherited, "HARNESS_OUTPUT_PROCESSES": "0", **(env or {})}


def run_cli(*args, cwd=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, as a user or a cron job runs it."""
    _check_tier("run_cli")
    full_env = cli_environment(env)
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


# 2 models, 4 steps per epoch, 24 steps, a checkpoint every 2 steps, one step per call: many
# checkpoint saves, so random kills land before, during and after them.
KILL_CONFIG = tiny_config(
    models=[{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet", "optimizer": {"name": "adam", "learning_rate": 0.01}}],
    train={"epochs": 6, "steps_per_call": 1, "checkpoint_every_steps": 2, "keep_checkpoints": 2},
    output={"progress": "lines"},
)
TOTAL_STEPS = 24


def start_cli(*args, env=None) -> subprocess.Popen:
    """The real CLI started, for a test to signal or kill. A kill can land inside a `.keras` save,
    whose asset folder tf_keras makes in the temp folder and removes only when the save ends: these
    processes' temp folder is one of the suite's own, removed when the test process exits. Ray keeps
    the system's (RAY_TMPDIR), where it finds a running cluster."""
    _check_tier("start_cli")
    scratch = {"TMPDIR": _killed_runs_temp(), "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", tempfile.gettempdir())}
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *map(str, args)],
        cwd=REPO, env=cli_environment({**scratch, **(env or {})}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@functools.cache
def _killed_runs_temp() -> str:
    folder = tempfile.mkdtemp(prefix="harness-tests-killed-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def only_run_dir(results: Path, name: str = "tiny") -> Path:
    (run_dir,) = run_dirs(results, name)
    return run_dir


def run_dirs(results: Path, name: str = "tiny") -> list[Path]:
    """The run directories of an experiment (not .data-cache or other hidden folders beside them)."""
    folder = results / name
    return [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []


def wait_for_rows(path: Path, at_least: int, timeout: float = 120, process=None) -> bool:
    """True once `path` has more than `at_least` lines; False if `process` ended first (it may
    have finished the run); a timeout is a failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") > at_least:
            return True
        if process is not None and process.poll() is not None:
            return False
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {at_least} rows in {timeout}s")


def wait_for_run_dir(results: Path, process, name: str = "tiny", timeout: float = 120) -> Path | None:
    """The run directory once the process has created it; None if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run_dirs(results, name):
            return only_run_dir(results, name)
        if process.poll() is not None:
            return None
        time.sleep(0.05)
    raise AssertionError(f"no run directory under {results / name} after {timeout}s")


@pytest.fixture
def crash_report(tmp_path, monkeypatch):
    """The file an internal error keeps its traceback in (errors.report_bug), written in this test's
    folder: `tempfile` caches its folder at first use, so a test's TMPDIR comes too late and the
    file would land in the system's. Call it once the error is reported: the one such file."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def written() -> Path:
        (crash,) = tmp_path.glob("harness-crash-*.txt")
        return crash

    return written


def run_main(*args) -> subprocess.CompletedProcess:
    """The CLI in this process (`harness.cli.main`), with what it prints captured: for tests of
    what a command says and returns, without a new process's start-up. Not for bit-for-bit
    comparisons with runs the real CLI made: this process has two logical CPU devices, which
    changes the last bits of some kernels' results."""
    import contextlib
    import io

    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(["harness", *map(str, args)], code, out.getvalue(), err.getvalue())


def member_rows(run_dir: Path) -> pd.DataFrame:
    rows = read_csv(run_dir / "losses.csv")
    return rows.sort_values(["model", "split", "metric", "step"]).reset_index(drop=True)


def assert_same_training(run_dir: Path, reference: Path) -> None:
    """Every member's rows (every value, bit for bit) and exported weights equal the reference's."""
    pd.testing.assert_frame_equal(member_rows(run_dir), member_rows(reference), check_exact=True)
    from harness.core.backend import import_keras

    keras = import_keras()
    for name in ("fcn", "unet", "deconv"):
        a = keras.models.load_model(run_dir / "models" / name / "model.keras", compile=False).get_weights()
        b = keras.models.load_model(reference / "models" / name / "model.keras", compile=False).get_weights()
        assert all(np.array_equal(x, y) for x, y in zip(a, b)), name


@pytest.fixture(scope="session")
def one_group(tmp_path_factory) -> Path:
    """TINY_CONFIG trained by the real CLI as one fused step: what runs split into groups (in
    processes of their own, locally or on Ray) must equal bit for bit."""
    folder = tmp_path_factory.mktemp("one_group")
    done = run_cli("run", write_yaml(folder / "c.yaml", tiny_config(output={"progress": "lines"})), "--results", folder / "r")
    assert done.returncode == 0, done.stderr
    return only_run_dir(folder / "r")


def saved_members(checkpoint_path) -> set[int]:
    """The positions of the members a checkpoint holds (its `member_<i>` keys)."""
    from harness.core.backend import import_tf

    keys = import_tf().train.load_checkpoint(str(checkpoint_path)).get_variable_to_shape_map()
    return {int(k.split("_")[1]) for k in keys if k.startswith("member_")}


def weights_of(path) -> list:
    """An exported model's weights, loaded with plain tf_keras."""
    from harness.core.backend import import_keras

    return import_keras().models.load_model(path, compile=False).get_weights()


class Killed(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs."""


def killed_in_save(monkeypatch, at_step: int, damage=None):
    """Make the save at `at_step` die: after TensorFlow wrote it, before harness recorded it
    (`damage(directory, step)` first: e.g. the index file a kill left empty)."""
    from harness.training import checkpoints as ckpt

    real_save = ckpt.save

    def dying_save(checkpoint, directory, step):
        path = real_save(checkpoint, directory, step)
        if step == at_step:
            if damage:
                damage(directory, step)
            raise Killed
        return path

    monkeypatch.setattr(ckpt, "save", dying_save)
