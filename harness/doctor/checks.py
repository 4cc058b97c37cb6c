"""What the doctor checks in its own process: versions, devices, memory and whether XLA, mixed
precision and op determinism work on each device. Each check returns a Finding; none raises."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass

from harness.core.backend import onednn_enabled, stderr_silenced
from harness.core.host import memory_bytes
from harness.rundir.hardware import this_machine


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok, FAILED, absent (an optional part not installed: not a failure), info
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == "FAILED"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(tf) -> list[Finding]:
    from harness import __version__ as harness_version

    build = tf.sysconfig.get_build_info()
    cuda = f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}" if build.get("is_cuda_build") else "a CPU-only build (no CUDA)"
    found = [Finding("python", "info", f"{platform.python_version()} ({platform.machine()}, {platform.system()})"),
             Finding("tensorflow", "info", f"{tf.__version__}, {cuda}"),
             Finding("harness", "info", harness_version)]  # the running code's, as run.json records it
    for package in ("tf_keras", "segmentation_models"):
        version = _version(package.replace("_", "-")) or _version(package)
        found.append(Finding(package, "info" if version else "FAILED", version or "not installed"))
    return found


def optional_parts() -> list[Finding]:
    """Ray and MLflow are extras: absent is not a failure, only said."""
    found = []
    for package, extra, what in (("ray", "ray", "placement.engine: ray"), ("mlflow-skinny", "mlflow", "output.mlflow")):
        version = _version(package) or (_version("mlflow") if package == "mlflow-skinny" else None)
        ui = " (with its UI: the full mlflow package)" if package == "mlflow-skinny" and _version("mlflow") else ""
        found.append(Finding(package.split("-")[0], "ok" if version else "absent",
                             f"{version}{ui}: {what} works" if version else f'not installed: pip install "harness[{extra}]" for {what}'))
    return found


def devices(tf) -> list[Finding]:
    found = [Finding("host memory", "info", _host_memory())]
    for device in tf.config.list_physical_devices():
        if device.device_type not in ("CPU", "GPU"):
            continue
        details = tf.config.experimental.get_device_details(device) if device.device_type == "GPU" else {}
        extra = ", ".join(f"{k} {v}" for k, v in details.items()) or _cpu_detail()
        found.append(Finding(f"device {device.name.removeprefix('/physical_device:')}", "info", extra))
    if not tf.config.list_physical_devices("GPU"):
        found.append(Finding("GPU", "info", "none found: harness runs on the CPU (GPU users: pip install -e \".[gpu]\", then run doctor again)"))
    return found


def _cpu_detail() -> str:
    """The cores, the instruction sets TensorFlow's CPU kernels choose their code by (run.json
    `hardware.cpu_isa`) and whether those kernels are oneDNN's (`hardware.onednn`): two hosts that
    give one CPU name may differ in them, and a fast run's digits and its timings with them."""
    isa = this_machine()["cpu_isa"]
    sets = f"; instruction sets {' '.join(isa)}" if isa else "; instruction sets not named by this system"
    onednn = onednn_enabled()
    kernels = "" if onednn is None else f"; oneDNN {'on' if onednn else 'off, TF_ENABLE_ONEDNN_OPTS=1 turns it on'}"
    return f"{os.cpu_count()} cores{sets}{kernels} (run.json hardware.cpu_isa, onednn: fast-mode digits and timings follow them)"


def _host_memory() -> str:
    memory = memory_bytes()
    if memory is None:
        return "unknown (no /proc/meminfo)"
    total, available = (b / 1024**3 for b in memory)
    return f"{total:.1f} GiB, {available:.1f} GiB available"


def _absent(tf, device: str) -> str | None:
    """TensorFlow would quietly run a check meant for a missing device elsewhere: refuse first."""
    kind, _, index = device.strip("/").partition(":")
    names = {d.name.lower() for d in tf.config.list_logical_devices()}
    return None if f"/device:{kind}:{index}".lower() in names else f"no device {device} (this process sees {', '.join(sorted(names))})"


def xla(tf, device: str) -> Finding:
    def square_sum(x):
        return tf.reduce_sum(x * x)

    if problem := _absent(tf, device):
        return Finding(f"XLA on {device}", "FAILED", problem)
    try:
        with tf.device(device):
            value = float(tf.function(square_sum, jit_compile=True)(tf.range(4.0)))
    except Exception as exc:  # XLA reports a missing backend under several error classes
        return Finding(f"XLA on {device}", "FAILED", _first_line(exc))
    return Finding(f"XLA on {device}", "ok" if value == 14.0 else "FAILED", "compiles and runs (model.jit_compile: true works)" if value == 14.0 else f"wrong result {value}")


def mixed_float16(tf, keras, device: str) -> Finding:
    """A float16 convolution and its gradient, as mixed_float16 computes the layers."""
    if problem := _absent(tf, device):
        return Finding(f"mixed_float16 on {device}", "FAILED", problem)
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # the policy's "this machine has no GPU" warning: the detail says it better
    try:
        # and TensorFlow's C++ notice "E0000 ... oneDNN supports DT_HALF only on platforms with
        # AVX-512" on such CPUs, which read as an error at the top of the doctor's output
        with tf.device(device), stderr_silenced():
            layer = keras.layers.Conv2D(4, 3, dtype=keras.mixed_precision.Policy("mixed_float16"))
            images = tf.random.stateless_uniform((2, 8, 8, 3), seed=(1, 2))
            with tf.GradientTape() as tape:
                out = layer(images)
                loss = tf.reduce_mean(tf.cast(out, tf.float32))
            grads = tape.gradient(loss, layer.trainable_variables)
        ok = out.dtype == tf.float16 and all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads)
    except Exception as exc:  # a device without float16 kernels
        return Finding(f"mixed_float16 on {device}", "FAILED", _first_line(exc))
    finally:
        logger.setLevel(level)
    note = "runs (float16 pays off on GPUs with tensor cores; on a CPU it is slower than float32)" if "CPU" in device.upper() else "runs: placement.precision mixed_float16 works"
    return Finding(f"mixed_float16 on {device}", "ok" if ok else "FAILED", note if ok else "non-finite gradients")


def determinism(tf, device: str) -> Finding:
    """Op determinism on: the same reduction of the same values twice gives the same bits."""
    if problem := _absent(tf, device):
        return Finding(f"op determinism on {device}", "FAILED", problem)
    tf.config.experimental.enable_op_determinism()
    try:
        with tf.device(device):
            values = tf.random.stateless_normal((4096, 64), seed=(3, 4))
            first, second = (tf.reduce_sum(tf.matmul(values, values, transpose_a=True)).numpy() for _ in range(2))
    except Exception as exc:
        return Finding(f"op determinism on {device}", "FAILED", _first_line(exc))
    finally:
        from harness.core.placement import configure_determinism

        configure_determinism(False)
    same = first == second
    return Finding(f"op determinism on {device}", "ok" if same else "FAILED", "repeatable (train.deterministic: true works)" if same else f"{first!r} != {second!r}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"
