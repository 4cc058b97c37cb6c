"""Process-wide TensorFlow settings a run depends on: determinism, devices, precision, placement.

Order matters: logical devices (split CPU, split GPU) can only be configured before TensorFlow
initialises its runtime, so `configure_devices` runs before anything creates a tensor.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from harness.core.backend import import_keras, import_tf, onednn_enabled
from harness.config.naming import model_of, repeats_span
from harness.config.schema import ExperimentConfig, PlacementSpec
from harness.errors import ConfigError

tf = import_tf()


def configure_determinism(deterministic: bool) -> None:
    """Deterministic mode: bitwise repeatable runs on CPU, and a model trained in the fused step
    equal to the same model trained alone.

    Op determinism alone is not enough for the second: Grappler rewrites the fused graph
    differently from a single-model graph (e.g. its arithmetic optimizer reorders sums), so the
    whole meta-optimizer is switched off too. Both settings are process-wide and must be set before
    the step is traced, and Grappler's before TensorFlow's runtime starts for the input pipeline
    to follow it (`input_pipeline_warning`). The default (fast) mode keeps Grappler and gives
    results that are equal in distribution, not bit for bit.
    """
    _grappler_when_runtime_started()  # before the setting changes: a runtime already started kept the old one
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    else:
        _disable_op_determinism()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": deterministic})


# Grappler's setting when TensorFlow's runtime started in this process; None until harness has
# seen it started. tf.data instantiates the input pipeline's functions with the runtime's config
# of that moment, not with the setting in force when they run: after other TensorFlow work with
# Grappler on, a deterministic run's images differ from a fresh process's in their last bit
# (measured: 1 ulp, in about a quarter of the synthetic pixels), and so do its rows.
_grappler_at_start: bool | None = None


def _grappler_when_runtime_started() -> bool | None:
    global _grappler_at_start
    if _grappler_at_start is None and _runtime_started():
        _grappler_at_start = not tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    return _grappler_at_start


def _runtime_started() -> bool:
    from tensorflow.python.eager import context

    return bool(getattr(context.context(), "_initialized", False))


def input_pipeline_warning(deterministic: bool) -> str | None:
    """What a deterministic run in a process whose TensorFlow started with Grappler on (the API
    after other TensorFlow work) must say: its input pipeline is not the command line's."""
    if not deterministic or not _grappler_when_runtime_started():
        return None
    return ("train.deterministic: TensorFlow's runtime started in this process with Grappler on (other TensorFlow work ran "
            "first), and the input pipeline keeps the setting it started with: this run's images can differ from a fresh "
            "process's in their last bit, and so its rows from `harness run`'s. It repeats in a process started the same "
            "way; for the command line's rows bit for bit, run it with `harness run` or before any other TensorFlow work")


def _disable_op_determinism() -> None:
    # Public API can only switch it on; a process that runs several experiments (tests, notebooks)
    # must be able to switch it off again for a fast run.
    try:
        from tensorflow.python.framework import config as tf_config

        tf_config.disable_op_determinism()
    except (ImportError, AttributeError):
        pass


def configure_devices(spec: PlacementSpec) -> None:
    """Split the CPU or the first GPU into logical devices, if the placement asks for it."""
    if spec.logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        _set_logical(cpu, [tf.config.LogicalDeviceConfiguration()] * spec.logical_cpus, "CPU", spec.logical_cpus)
    if spec.strategy == "split_gpu":
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            raise ConfigError("placement.strategy: split_gpu needs a GPU, and this machine has none")
        config = [tf.config.LogicalDeviceConfiguration(memory_limit=spec.split_gpu.memory_mb)] * spec.split_gpu.count
        _set_logical(gpus[0], config, "GPU", spec.split_gpu.count)


def _set_logical(physical, config, kind: str, count: int) -> None:
    try:
        tf.config.set_logical_device_configuration(physical, config)
    except RuntimeError:
        # Already initialised (a notebook or a test process that ran something before): fine if
        # the split is already the one asked for.
        have = len(tf.config.list_logical_devices(kind))
        if have < count:
            raise ConfigError(
                f"placement: TensorFlow is already initialised with {have} logical {kind} device(s) in "
                f"this process; {count} cannot be made now. Start a new process (the harness CLI does)."
            ) from None


def configure_precision(precision: str) -> None:
    keras = import_keras()
    keras.mixed_precision.set_global_policy(precision)


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where the step runs: the strategy, each model's device, and the plan run.json records.

    `distributed`: the step goes through the strategy (strategy.run, its distributed iterator).
    Single-replica placements on host devices skip both and pin the members instead: the same ops,
    about 1 ms less dispatch per compiled call (README, Benchmarks)."""

    strategy: Any
    model_devices: dict[str, str | None] = field(default_factory=dict)  # members' pins
    plan: dict[str, Any] = field(default_factory=dict)
    is_chief: bool = True
    distributed: bool = True

    def input_iterator(self, dataset):
        """The iterator the compiled step reads batches from."""
        return iter(self.strategy.experimental_distribute_dataset(dataset) if self.distributed else dataset)

    def wait_for_every_worker(self) -> None:
        """Over several workers, return once every one got here (a sum over them: a collective
        waits for all). A worker that left while the chief still wrote its outputs was reported by
        the chief's coordination service as crashed ("stopped sending heartbeats") in a run that
        had not failed."""
        if not isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return

        def one_each():
            return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))

        tf.function(lambda: self.strategy.run(one_each), autograph=False)()


def build_placement(config: ExperimentConfig) -> Placement:
    spec = config.placement
    kind = spec.strategy
    if kind == "auto":
        gpus = _names("GPU")
        kind = "mirrored" if len(gpus) > 1 else "one_device"
    if kind == "one_device":
        return _one_device(config)
    if kind == "mirrored":
        return _mirrored(config, _chosen_devices(spec, "mirrored"))
    if kind == "per_model":
        return _per_model(config, _chosen_devices(spec, "per_model"))
    if kind == "split_gpu":
        return _per_model(config, _names("GPU"), label="split_gpu")
    return _multi_worker(config)


def _names(kind: str | None = None) -> list[str]:
    return [d.name for d in tf.config.list_logical_devices(kind)]


def device_names() -> list[str]:
    return _names()


def gpu_names() -> list[str]:
    """The physical GPUs' model names ("NVIDIA A100-SXM4-40GB"), for run.json's `hardware`."""
    return [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name) for gpu in tf.config.list_physical_devices("GPU")]


def tensorflow_hardware() -> dict[str, Any]:
    """What of run.json's `hardware` only TensorFlow can say, as `rundir.this_machine` takes it:
    the GPUs' model names and whether the CPU's kernels are oneDNN's."""
    return {"gpus": gpu_names(), "onednn": onednn_enabled()}


def _normalise(name: str) -> str:
    name = name.lower().replace("/job:localhost/replica:0/task:0", "")
    return name.replace("/device:", "/").strip("/")


def _check_exists(devices: list[str], key: str) -> None:
    existing = {_normalise(d) for d in _names()}
    missing = [d for d in devices if _normalise(d) not in existing]
    if missing:
        raise ConfigError(
            f"{key}: device(s) {', '.join(missing)} do not exist; this machine has {', '.join(_names())}"
        )


def _chosen_devices(spec: PlacementSpec, label: str) -> list[str]:
    if spec.devices:
        _check_exists(spec.devices, "placement.devices")
        if len(set(map(_normalise, spec.devices))) != len(spec.devices):
            raise ConfigError(f"placement.devices: a device is listed twice: {spec.devices}")
        return list(spec.devices)
    devices = _names("GPU") or _names("CPU")
    if label == "mirrored" and len(devices) < 2:
        raise ConfigError(
            "placement.strategy: mirrored needs two or more devices and this machine has "
            f"{', '.join(_names())}; use one_device, or placement.logical_cpus: 2 to try it on a CPU"
        )
    return devices


def _one_device(config: ExperimentConfig) -> Placement:
    spec = config.placement
    if spec.device:
        _check_exists([spec.device], "placement.device")
        device = spec.device
    else:
        gpus = _names("GPU")
        device = gpus[0] if gpus else "/cpu:0"
    if "gpu" not in _normalise(device):
        return _per_model(config, [device], label="one_device")
    # On a GPU the strategy's iterator earns its dispatch cost: it prefetches batches to the GPU.
    plan = _plan("one_device", [device], 1, config, {m.name: [device] for m in config.member_specs()})
    return Placement(tf.distribute.OneDeviceStrategy(device), plan=plan)


_MIRRORED: dict[tuple[str, ...], Any] = {}


def _mirrored(config: ExperimentConfig, devices: list[str]) -> Placement:
    _check_divisible(config.data.batch_size, len(devices), "mirrored")
    plan = _plan("mirrored", devices, len(devices), config, {m.name: list(devices) for m in config.member_specs()})
    # One strategy per device set and process: a second MirroredStrategy reuses the first one's
    # collective keys, and TensorFlow's process-wide cache of collective parameters then mixes the
    # two runs' all-reduces up (shape mismatch). Reusing the object keeps the keys increasing.
    key = tuple(_normalise(d) for d in devices)
    if key not in _MIRRORED:
        _MIRRORED[key] = tf.distribute.MirroredStrategy(devices)
    return Placement(_MIRRORED[key], plan=plan)


def _per_model(config: ExperimentConfig, devices: list[str], label: str = "per_model") -> Placement:
    if not devices:
        raise ConfigError(f"placement.strategy: {label} found no devices to pin models to")
    pins = {m.name: devices[i % len(devices)] for i, m in enumerate(config.member_specs())}
    plan = _plan(label, devices, 1, config, {name: [d] for name, d in pins.items()})
    return Placement(tf.distribute.get_strategy(), model_devices=pins, plan=plan, distributed=False)


def _multi_worker(config: ExperimentConfig) -> Placement:
    cluster = read_tf_config()
    workers = cluster["cluster"].get("worker", [])
    task = cluster["task"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    _check_divisible(config.data.batch_size, replicas, "multi_worker")
    devices = [f"/job:worker/replica:0/task:{i}" for i in range(len(workers))]
    plan = _plan("multi_worker", devices, replicas, config, {m.name: devices for m in config.member_specs()})
    plan["task"] = task
    is_chief = task.get("type") == "chief" or (task.get("type") == "worker" and int(task.get("index", 0)) == 0 and "chief" not in cluster["cluster"])
    plan["chief"] = is_chief  # the others train in a scratch run folder, removed when they finish
    return Placement(strategy, plan=plan, is_chief=is_chief)


def read_tf_config() -> dict[str, Any]:
    """TF_CONFIG, checked: a cluster with workers, and this process's task in it."""
    raw = os.environ.get("TF_CONFIG")
    hint = (
        'set TF_CONFIG to e.g. {"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
        '"task": {"type": "worker", "index": 0}} on each machine (index differs), or try it locally '
        "with: harness workers 2 CONFIG"
    )
    if not raw:
        raise ConfigError(f"placement.strategy: multi_worker needs TF_CONFIG in the environment; {hint}")
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({exc}); {hint}") from None
    cluster, task = parsed.get("cluster") if isinstance(parsed, dict) else None, parsed.get("task") if isinstance(parsed, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ConfigError(f"TF_CONFIG needs 'cluster' and 'task' mappings; {hint}")
    members = cluster.get(task.get("type"), [])
    index = task.get("index")
    if not isinstance(index, int) or not isinstance(members, list) or not 0 <= index < len(members):
        raise ConfigError(f"TF_CONFIG task {task} is not in its cluster {cluster}; {hint}")
    return parsed


def _check_divisible(batch: int, replicas: int, label: str) -> None:
    if batch % replicas:
        raise ConfigError(
            f"data.batch_size: {label} splits the global batch over {replicas} replicas, and "
            f"{batch} is not divisible by {replicas}; use e.g. {max(replicas, batch // replicas * replicas)}"
        )


def _plan(strategy: str, devices: list[str], replicas: int, config: ExperimentConfig, models: dict) -> dict[str, Any]:
    batch = config.data.batch_size
    return {
        "strategy": strategy,
        "devices": devices,
        "replicas": replicas,
        "global_batch": batch,
        "per_replica_batch": batch // replicas,
        "precision": config.placement.precision,
        "models": models,
    }


def describe_plan(plan: dict[str, Any]) -> list[str]:
    """Lines for the terminal: the strategy, the batch split, and each model's device(s)."""
    lines = [
        f"placement: {plan['strategy']}, {plan['replicas']} replica(s), global batch {plan['global_batch']} "
        f"({plan['per_replica_batch']} per replica), {plan['precision']}"
    ]
    placed: dict[tuple[str, tuple[str, ...]], list[str]] = {}  # a model's seeds on the same devices: one line
    for member, devices in plan["models"].items():
        placed.setdefault((model_of(member), tuple(devices)), []).append(member)
    lines += [f"  {repeats_span(members)}: {', '.join(devices)}" for (_, devices), members in placed.items()]
    return lines
