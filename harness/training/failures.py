"""Turning what went wrong into errors a user can act on: resource failures (which resource, what
to try) and XLA failures (which members cannot be compiled)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.core.backend import import_tf
from harness.core.step import member_fragment
import os

from harness.errors import ConfigError, DataError, OutOfMemory, ResourceError
from harness.members.base import preserved_state
from harness.rundir import is_disk_full

tf = import_tf()


BAD_DATA = "data store: "  # how the data store's DataError begins, also once TensorFlow has wrapped it
# A multi-worker run's non-chief workers train in a scratch run folder of this prefix (entry.py):
# what they say of resuming names the chief's folder, not theirs.
WORKER_SCRATCH = "harness-worker-"
# What TensorFlow says, whatever the error's class, once a collective was aborted for a lost peer.
PEER_GONE = ("Collective ops is aborted", "stopped sending heartbeats")
# Which worker TensorFlow's coordination service found gone, as its UnavailableError names it.
_LOST_TASK = re.compile(r"(?:unhealthy[^:]*:\s*|Error reported from )(/job:[\w-]+(?:/replica:\d+)?/task:\d+)")


def translate(exc: BaseException, where: Path) -> BaseException:
    """Resource failures as ResourceError (exit 4); anything else unchanged.

    TensorFlow raises ResourceExhaustedError both for a full disk (writing a checkpoint) and for
    device memory; the message tells them apart."""
    if is_disk_full(exc):
        return ResourceError(
            f"disk full while writing {exc.filename or where}: free some space on that disk or "
            "choose another results directory (--results DIR). The last checkpoint is intact: "
            f"harness resume {where} continues once there is room."
        )
    if isinstance(exc, tf.errors.OpError) and BAD_DATA in str(exc):  # raised by the data store inside tf.data
        line = next(l for l in str(exc).splitlines() if BAD_DATA in l)
        return DataError(line[line.index(BAD_DATA):].strip().rstrip("'\""))
    if isinstance(exc, tf.errors.UnavailableError) or (isinstance(exc, tf.errors.OpError) and any(s in str(exc) for s in PEER_GONE)):
        return lost_worker(exc, where)
    if isinstance(exc, tf.errors.ResourceExhaustedError):
        text = str(exc)
        if "No space left" in text or "disk" in text.lower() or "write" in text.lower():
            return ResourceError(
                f"disk full while writing under {where} ({tensorflow_said(text)}): free some "
                f"space, then harness resume {where}"
            )
        return OutOfMemory(
            "out of memory while training: lower data.batch_size or data.image_size, train fewer "
            "models at once, or use placement.precision mixed_float16 on a GPU. "
            f"TensorFlow said: {tensorflow_said(text)}"
        )
    return exc


# TensorFlow's wrapping of an op's error: `{{function_node __wrapped__SaveV2_dtypes_171_device_/job:
# localhost/...}} ` before it and ` [Op:SaveV2]` after it, which pushed "No space left on device"
# past the 200 characters a message quotes.
_OP_WRAPPING = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]*\]$")


def tensorflow_said(text: str) -> str:
    """The first line of a TensorFlow error without its op wrapping, at most 200 characters:
    `/run/checkpoints/ckpt-24_temp/part-00000-of-00001.data-00000-of-00001...; No space left on device`."""
    return _OP_WRAPPING.sub("", text.splitlines()[0] if text else "")[:200]


def lost_worker(exc: BaseException, where: Path) -> ResourceError:
    """Exit 4 for a peer that stopped answering (its process killed, its machine lost, the network
    between them cut): a collective waits for every worker, so the rest cannot go on, and no
    checkpoint can be written once TensorFlow has aborted its collectives."""
    text = str(exc)
    tasks = list(dict.fromkeys(_LOST_TASK.findall(text)))
    who = f"{tasks[-1]} stopped sending heartbeats" if "heartbeats" in text and tasks else (tasks[-1] if tasks else "a peer stopped answering")
    scratch = any(part.startswith(WORKER_SCRATCH) for part in where.parts)
    resume = "harness resume on the chief's run folder" if scratch else f"harness resume {where}"
    said = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    said = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", said)[:200]
    return ResourceError(
        f"a worker of the cluster was lost ({who}: its process or machine stopped, or the network to it failed); the other "
        f"workers cannot step without it, so the run stops here. Start every worker again, each with its TF_CONFIG as before, "
        f"running {resume}: it continues from the last checkpoint (from the start if none was written). TensorFlow said: {said}"
    )


# Tests of the out-of-memory path: a device of this many MB, on which a group whose plan needs
# more (HARNESS_GROUP_PLANNED_MB, set by the group driver) fails at its first step, with the error
# a real out-of-memory raises.
TEST_DEVICE_MB = "HARNESS_TEST_DEVICE_MB"
GROUP_PLANNED_MB = "HARNESS_GROUP_PLANNED_MB"


def raise_injected_oom() -> None:
    device, planned = os.environ.get(TEST_DEVICE_MB), os.environ.get(GROUP_PLANNED_MB)
    if device and planned and float(planned) > float(device):
        raise tf.errors.ResourceExhaustedError(
            None, None, f"OOM when allocating tensor: the group needs {planned} MB, the test device has {device} MB ({TEST_DEVICE_MB})"
        )


def explain_jit_failure(members: list, data, exc: Exception) -> ConfigError:
    """Find which members XLA cannot compile, by compiling each one's fragment alone on a batch of
    one shaped as the run's (`data`: its DataSpec)."""
    failing = []
    images = tf.zeros((1, *data.input_shape))
    masks = tf.zeros((1, *data.image_size, data.classes))
    for m in members:
        if not m.spec.jit_compile:
            continue
        try:
            with preserved_state(m):
                member_fragment(m, 1, jit_compile=True)(images, masks, tf.constant(0, tf.int64))
        except Exception as inner:  # XLA reports unsupported ops under several error classes
            failing.append(f"{m.name} ({m.spec.arch}): {str(inner).splitlines()[0][:200]}")
    detail = failing or [f"XLA error: {str(exc).splitlines()[0][:300]}"]
    return ConfigError(
        "jit_compile: XLA cannot compile these models on this device; set jit_compile: false for "
        "them (models.<name>.jit_compile) or for the run (train.jit_compile):",
        detail,
    )
