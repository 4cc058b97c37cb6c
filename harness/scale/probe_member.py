"""What one member costs, measured in a process of its own: params, forward FLOPs, the peak memory
of one training step and its step time. `python -m harness.scale.probe_member` reads a one-model
config (JSON) on stdin and prints the figures as JSON on its last line.

Memory is measured, not guessed from parameter counts (an EfficientNetB3 of 22M parameters can
need more than an InceptionResNetV2 of 109M): on a GPU, TensorFlow's peak after
`reset_memory_stats`; on a CPU, how far the process's peak resident memory rose above what it
held before the model was built. A fresh process per member, because TensorFlow keeps what it
allocated until the process ends. Results are cached by everything that changes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.config.recipes import ACCEPTED
from harness.config.schema import ExperimentConfig
from harness.core.backend import code_path
from harness.errors import ConfigError
from harness.rundir import atomic_write_text, versions

PROBE_STEPS = 3  # timed steps after the one that traces


def probe_config(config: ExperimentConfig, model: str) -> dict[str, Any]:
    """A config of one model and the run's batch, on synthetic data of the run's shape: the
    probe measures the model's step, not the input pipeline."""
    raw = config.to_dict()
    raw["models"] = [m for m in raw["models"] if m["name"] == model]
    data = raw["data"]
    batch = data["batch_size"]
    raw["data"] = {"source": "synthetic", "image_size": data["image_size"], "channels": data["channels"], "classes": data["classes"],
                   "batch_size": batch, "train_size": 2 * batch, "val_size": batch}
    # One model, a few steps: nothing to race or stop early (a race of one model is refused).
    raw["train"].update(repeats=1, steps=PROBE_STEPS + 1, deterministic=False, race=None, early_stopping=None)
    raw["placement"].update(grouping="single", engine="local", strategy="auto", memory_budget_mb=None, max_members_per_group=None, parallel_groups=None)
    raw["output"].update(progress="none", mlflow=None)
    return raw


def cache_key(raw: dict[str, Any], device: str) -> str:
    """What changes a member's cost: its network and options, kind, loss and optimizer (Adam keeps
    two more copies of the weights than SGD), input shape, batch, precision, the device and the
    versions; not its learning rate or its name."""
    model = {k: v for k, v in raw["models"][0].items() if k not in ("name", "grid_values", "weights")}
    model["optimizer"] = (model.get("optimizer") or {}).get("name")
    key = {"model": model, "data": raw["data"], "precision": raw["placement"]["precision"], "device": device,
           "batchnorm_momentum": raw["train"].get("batchnorm_momentum"), "versions": versions()}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def measure(raw: dict[str, Any], cache: Path, device: str, say=print, timeout_s: float = 900) -> dict[str, Any]:
    """The member's figures, from the cache or from a new probe process."""
    path = cache / f"{cache_key(raw, device)}.json"
    if path.exists():
        cached = read_cached(path)
        if cached is not None:
            return {**cached, "cached": True}
        say(f"harness: the plan cache entry {path} is damaged or from another version: measuring again")
    say(f"harness: measuring {raw['models'][0]['name']} alone in a probe process (cached after this) ...")
    try:
        done = subprocess.run([sys.executable, "-m", "harness.scale.probe_member"], input=json.dumps(raw), capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **code_path()})  # the factories this process imports, wherever it was started
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the memory probe of {raw['models'][0]['name']} took over {timeout_s:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise ConfigError(f"the memory probe of model {raw['models'][0]['name']!r} failed (exit {done.returncode}):", [tail])
    figures = json.loads(lines[-1])
    try:
        atomic_write_text(path, json.dumps(figures, indent=1) + "\n")
    except OSError as exc:  # the cache only saves time: a cache that cannot be written costs a new probe next time
        say(f"harness: the plan cache entry {path} cannot be written ({exc.strerror or exc}): it will be measured again next time")
    return {**figures, "cached": False}


def read_cached(path: Path) -> dict[str, Any] | None:
    """A cache entry's figures, or None if it cannot be trusted: unreadable, not JSON, not an
    object, or missing a figure (an older version's format)."""
    try:
        figures = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(figures, dict) or any(not isinstance(figures.get(k), (int, float)) or isinstance(figures.get(k), bool)
                                            for k in ("params", "peak_mb", "ms_per_step", "trace_s")):
        return None
    return figures


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def _probe(raw: dict[str, Any]) -> dict[str, Any]:
    import harness  # noqa: F401  (tf_keras before TensorFlow)
    from harness.core.backend import import_tf
    from harness.core.step import make_train_loop
    from harness.data.pipeline import build_datasets
    from harness.members.registry import build_members, check_code
    from harness.training.entry import prepare_process
    from harness.training.flops import forward_flops

    tf = import_tf()
    config = ExperimentConfig.model_validate(raw, context={ACCEPTED: True})
    check_code(config)
    placement = prepare_process(config)
    iterator = placement.input_iterator(build_datasets(config.data, config.training_seeds(), 0, config.total_steps).train)
    gpus = tf.config.list_logical_devices("GPU")
    baseline = rss_mb()
    if gpus:
        tf.config.experimental.reset_memory_stats(gpus[0].name)
    with placement.strategy.scope():
        members = build_members(config, placement.model_devices)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    loop = make_train_loop(members, placement, global_step, config.data.batch_size, 1, {})
    began = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), loop(iterator, 1))  # traces, then runs one step
    trace_s = time.perf_counter() - began
    began = time.perf_counter()
    for _ in range(PROBE_STEPS):
        tf.nest.map_structure(lambda t: t.numpy(), loop(iterator, 1))
    ms = 1000 * (time.perf_counter() - began) / PROBE_STEPS
    peak = tf.config.experimental.get_memory_info(gpus[0].name)["peak"] / 2**20 if gpus else peak_rss_mb() - baseline
    member = members[0]
    return {"model": member.name, "params": int(member.params), "flops_per_example": forward_flops(member.model, config.data.input_shape),
            "peak_mb": round(peak, 1), "ms_per_step": round(ms, 2), "trace_s": round(trace_s, 2), "memory_from": "gpu_peak" if gpus else "rss_growth"}


def main() -> int:
    raw = json.loads(sys.stdin.read())
    print(json.dumps(_probe(raw)))
    return 0


if __name__ == "__main__":
    from harness.leaving import leave

    leave(main())  # without the interpreter's teardown, which `harness plan` waited for: 1.2-1.7 s a sm network
