"""Process-wide TensorFlow settings a run depends on: determinism and the distribution strategy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .backend import import_tf
from .config import ExperimentConfig
from .errors import ConfigError

tf = import_tf()


def configure_determinism(deterministic: bool) -> None:
    """Deterministic mode: bitwise repeatable runs on CPU, and a model trained in the fused step
    equal to the same model trained alone.

    Op determinism alone is not enough for the second: Grappler rewrites the fused graph
    differently from a single-model graph (e.g. its arithmetic optimizer reorders sums), so the
    whole meta-optimizer is switched off too. Both settings are process-wide and must be set before
    the step is traced. The default (fast) mode keeps Grappler and gives results that are equal in
    distribution, not bit for bit.
    """
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    else:
        _disable_op_determinism()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": deterministic})


def _disable_op_determinism() -> None:
    # Public API can only switch it on; a process that runs several experiments (tests, notebooks)
    # must be able to switch it off again for a fast run.
    try:
        from tensorflow.python.framework import config as tf_config

        tf_config.disable_op_determinism()
    except (ImportError, AttributeError):
        pass


@dataclass(frozen=True)
class Placement:
    """Where the step runs: the strategy and the plan that run.json records."""

    strategy: Any
    plan: dict[str, Any] = field(default_factory=dict)


def build_placement(config: ExperimentConfig) -> Placement:
    spec = config.placement
    devices = [d.name for d in tf.config.list_logical_devices()]
    if spec.strategy == "one_device" and spec.device:
        wanted = _normalise_device(spec.device)
        if not any(_normalise_device(d) == wanted for d in devices):
            raise ConfigError(
                f"placement.device: device {spec.device!r} does not exist; "
                f"this machine has {', '.join(devices)}"
            )
        device = spec.device
    else:
        gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
        device = gpus[0] if gpus else "/cpu:0"
    strategy = tf.distribute.OneDeviceStrategy(device)
    plan = {
        "strategy": "one_device",
        "devices": [device],
        "replicas": 1,
        "global_batch": config.data.batch_size,
        "per_replica_batch": config.data.batch_size,
        "models": {m.name: [device] for m in config.models},
    }
    return Placement(strategy, plan)


def _normalise_device(name: str) -> str:
    name = name.lower().replace("/job:localhost/replica:0/task:0", "")
    return name.replace("/device:", "/").lstrip("/")


def device_names() -> list[str]:
    return [d.name for d in tf.config.list_logical_devices()]
