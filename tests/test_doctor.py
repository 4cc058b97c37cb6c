"""`harness doctor`: versions, devices, XLA, mixed precision and determinism checked here on the
CPU, and a tiny fused step on each placement this machine allows (logical CPUs), each compared with
the CPU's losses; a placement that fails is named and the exit code says so."""

from __future__ import annotations

import io
import os

import pandas as pd
import pytest
from conftest import run_cli

from harness.core.backend import import_keras, import_tf
from harness.doctor import checks
from harness.doctor.placements import TOLERANCE, Trial, _compared, trials_for
from harness.errors import EXIT_RESOURCES

tf = import_tf()


def test_each_device_check_passes_on_this_cpu():
    for finding in (checks.xla(tf, "/cpu:0"), checks.mixed_float16(tf, import_keras(), "/cpu:0"), checks.determinism(tf, "/cpu:0")):
        assert finding.status == "ok", finding


def test_the_cpu_line_names_the_instruction_sets_its_kernels_choose_by():
    from harness.rundir import this_machine

    (cpu,) = [f for f in checks.devices(tf) if f.name == "device CPU:0"]
    isa = this_machine()["cpu_isa"]
    assert cpu.detail.startswith(f"{os.cpu_count()} cores; instruction sets") and all(name in cpu.detail for name in isa or [])


def test_a_device_that_does_not_exist_fails_the_check_by_name():
    finding = checks.xla(tf, "/gpu:7")
    assert finding.failed and finding.name == "XLA on /gpu:7" and "no device /gpu:7" in finding.detail


def test_versions_name_tensorflow_and_the_cuda_build():
    found = {f.name: f for f in checks.versions(tf)}
    assert found["tensorflow"].detail.startswith(tf.__version__) and ("CUDA" in found["tensorflow"].detail)
    assert found["segmentation_models"].detail == "1.0.1" and not any(f.failed for f in found.values())
    from harness.rundir import versions

    assert found["harness"].detail == versions()["harness"]  # the version a run records


def test_the_placements_tried_follow_the_devices_the_machine_has():
    assert [t.name for t in trials_for(0)] == ["one_device /cpu:0", "mirrored over 2 logical CPUs", "per_model over 2 logical CPUs"]
    one_gpu = [t.name for t in trials_for(1)]
    assert one_gpu[0] == "one_device /cpu:0" and "split_gpu: 2 logical GPUs" in one_gpu and "one_device /gpu:0, mixed_float16" in one_gpu
    assert {"mirrored over 4 GPUs", "per_model over 4 GPUs"} <= {t.name for t in trials_for(4)}


def test_losses_beyond_the_tolerance_fail_and_within_pass():
    index = pd.MultiIndex.from_tuples([("a", 1), ("a", 2)], names=["model", "step"])
    reference = pd.Series([1.0, 0.5], index=index)
    trial = Trial("x", (), TOLERANCE["float32 cpu"])
    assert _compared(trial, reference * (1 + 1e-7), reference).status == "ok"
    off = _compared(trial, reference * (1 + 1e-3), reference)
    assert off.failed and "1.0e-03" in off.detail


def test_doctor_passes_on_this_machine_with_every_placement(tmp_path):
    result = run_cli("doctor", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for expected in ("fused step: one_device /cpu:0", "fused step: mirrored over 2 logical CPUs", "fused step: per_model over 2 logical CPUs"):
        (line,) = [l for l in lines if expected in l]
        assert line.startswith("ok"), line
    assert "everything this machine has works" in result.stdout
    assert "E0000" not in result.stderr and "oneDNN" not in result.stderr, result.stderr  # TensorFlow's float16 notice


@pytest.mark.subprocess  # the trial is a `harness run` process
def test_a_failing_placement_is_named_and_exits_4(monkeypatch):
    from harness.doctor import report

    monkeypatch.setattr(report, "trials_for", lambda gpus: [Trial("a placement that does not exist", ("placement.strategy=teleport",), 0.0)])
    out = io.StringIO()
    assert report.run_doctor(out=out) == EXIT_RESOURCES
    assert "FAILED  fused step: a placement that does not exist" in out.getvalue()
    assert "exit 2:" in out.getvalue() and "teleport" in out.getvalue()  # what `harness run` said
    assert "1 check(s) failed: fused step: a placement that does not exist" in out.getvalue()
