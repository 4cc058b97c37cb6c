"""The doctor's tiny fused steps: two small members trained for a few steps on each placement the
machine allows, each in a process of its own (devices are split before TensorFlow starts, once per
process), through `harness run` itself; their losses at every step are compared with the CPU's."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.doctor.checks import Finding

TRIAL_CONFIG = {
    "name": "doctor",
    "seed": 7,
    "data": {"image_size": [32, 32], "train_size": 16, "val_size": 8, "batch_size": 4},
    # No BatchNormalization: a mirrored step normalises each replica's share of the batch, which
    # changes the losses by design (about 1% here), not because a device computes wrongly.
    "models": [{"name": "fcn", "arch": "tiny_fcn", "options": {"batchnorm": False}},
               {"name": "wide", "arch": "tiny_fcn", "options": {"batchnorm": False, "width": 12}, "optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}}],
    "train": {"epochs": 2, "steps_per_call": 2, "deterministic": True},
    "output": {"progress": "none", "probe_steps": 0, "export": False, "serve_probe": False, "tensorboard": False, "sample_images": 0},
}
# How far a placement's training losses may stand from the CPU's, relative, at any step. Float32 on
# CPU devices: reductions in another order (a mirrored all-reduce) move the last bits only. GPUs
# run other kernels (cuDNN's convolutions, TF32 matmuls on recent GPUs); float16 rounds far more.
TOLERANCE = {"float32 cpu": 1e-5, "float32 gpu": 1e-2, "mixed_float16": 5e-2}


@dataclass(frozen=True)
class Trial:
    name: str
    settings: tuple[str, ...]  # --set KEY=VALUE for `harness run`
    tolerance: float


def trials_for(gpus: int) -> list[Trial]:
    """The CPU first (the reference), then every placement this machine allows."""
    cpu = Trial("one_device /cpu:0", ("placement.strategy=one_device", "placement.device=/cpu:0"), 0.0)
    if gpus == 0:
        two_cpus = ("placement.logical_cpus=2",)
        return [cpu, Trial("mirrored over 2 logical CPUs", ("placement.strategy=mirrored", *two_cpus), TOLERANCE["float32 cpu"]),
                Trial("per_model over 2 logical CPUs", ("placement.strategy=per_model", *two_cpus), TOLERANCE["float32 cpu"])]
    gpu = TOLERANCE["float32 gpu"]
    found = [cpu, Trial("one_device /gpu:0", ("placement.strategy=one_device", "placement.device=/gpu:0"), gpu),
             Trial("one_device /gpu:0, mixed_float16", ("placement.strategy=one_device", "placement.device=/gpu:0", "placement.precision=mixed_float16"), TOLERANCE["mixed_float16"]),
             Trial("one_device /gpu:0, XLA", ("placement.strategy=one_device", "placement.device=/gpu:0", "models.fcn.jit_compile=true", "models.wide.jit_compile=true"), gpu)]
    if gpus >= 2:
        found += [Trial(f"mirrored over {gpus} GPUs", ("placement.strategy=mirrored",), gpu), Trial(f"per_model over {gpus} GPUs", ("placement.strategy=per_model",), gpu)]
    else:
        found.append(Trial("split_gpu: 2 logical GPUs", ("placement.strategy=split_gpu", "placement.split_gpu.count=2", "placement.split_gpu.memory_mb=1024"), gpu))
    return found


def run_trials(trials: list[Trial], say=print) -> list[Finding]:
    with tempfile.TemporaryDirectory(prefix="harness-doctor-") as folder:
        config = Path(folder) / "doctor.yaml"
        config.write_text(yaml.safe_dump(TRIAL_CONFIG, sort_keys=False), encoding="utf-8")
        reference, found = None, []
        for i, trial in enumerate(trials):
            say(f"harness doctor: a fused step of 2 members, {trial.name} ...")
            losses, problem = _train(config, Path(folder) / f"r{i}", trial)
            if problem:
                found.append(Finding(f"fused step: {trial.name}", "FAILED", problem))
            elif reference is None:
                reference = losses
                found.append(Finding(f"fused step: {trial.name}", "ok", f"trains ({len(losses)} losses: the reference)"))
            else:
                found.append(_compared(trial, losses, reference))
        return found


def _train(config: Path, results: Path, trial: Trial):
    from harness.rundir import read_csv

    command = [sys.executable, "-m", "harness", "run", str(config), "--results", str(results)]
    command += [word for setting in trial.settings for word in ("--set", setting)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return None, "did not finish in 15 minutes"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return None, f"exit {done.returncode}: {lines[-1][:300] if lines else 'no message'}"
    (csv,) = results.glob("doctor/*/losses.csv")
    rows = read_csv(csv).query("split == 'train' and metric == 'loss'")
    return rows.set_index(["model", "step"])["value"].sort_index(), None


def _compared(trial: Trial, losses, reference) -> Finding:
    if not losses.index.equals(reference.index):
        return Finding(f"fused step: {trial.name}", "FAILED", "trained other steps than the CPU")
    relative = float(((losses - reference).abs() / reference.abs().clip(lower=1e-12)).max())
    ok = relative <= trial.tolerance
    detail = f"losses within {relative:.1e} of the CPU's (relative, every step; allowed {trial.tolerance:.0e})"
    return Finding(f"fused step: {trial.name}", "ok" if ok else "FAILED", detail)
