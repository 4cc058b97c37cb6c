"""What a trained model costs to serve: measured after training, on the run's device (each
model's own with `per_model`), in inference mode (`training=False`: no weight, no BatchNorm
statistic changes).

- latency at batch 1: median and 90th percentile over `calls` (50) calls after a warm-up, however
  long they take: a 90th percentile of 10 calls is their largest but one (a 48-ms FPN: 2.4 s).
  The models' calls are interleaved, in LATENCY_ROUNDS rounds of a fifth of them each, every
  model in turn, the order turned round by round: a machine that slows for a moment (another
  process, the clock) slows every model's latency alike, not only the one being timed then. On
  smoke's three networks, 20 probes in one process, the ratio of two models' latencies moved with a
  coefficient of variation of 0.11-0.18 timed one model after another, 0.06-0.07 interleaved, and
  fcn's and deconv's order flipped in 1 probe of 20 against none;
- throughput at the serving batch (`output.serve_batch`): images per second at the median of at
  most `calls // 5` calls, at least 3, fewer once they took `seconds`;
- peak memory the measurement added: the peak of TensorFlow's allocator for the model's device
  (reset first) above what it held when the measurement began, on a GPU and on a CPU alike: the
  activations and scratch tensors of the largest call (the serving batch's), not the weights,
  which `model_mb` sizes. A CPU's allocator keeps that figure because harness selects
  TensorFlow's BFC allocator before TensorFlow makes it (harness/core/backend.py); where it keeps
  none (a process whose TensorFlow made a tensor before harness was imported, or the user's own
  TF_CPU_ALLOCATOR_USE_BFC=false), the process's peak resident set on Linux (reset through
  /proc/self/clear_refs), which reads near 0 for a model whose inference fits in memory training
  freed;
- the exported file's size (models/<name>/model.keras).

A compiled inference function (`tf.function`) is what serving uses, traced once for any batch
size, as the exported SavedModel's `serve` endpoint is (`serving_function`); each call is followed
by a host read of its output, so a call's time includes the device finishing its work.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.backend import import_tf
from harness.core.member_step import on_device

tf = import_tf()
WARMUP_CALLS = 3
LATENCY_ROUNDS = 5  # batch 1's calls in 5 rounds, every model in each (10 calls a round of the default 50)


def measure_serving(model, input_shape: tuple[int, ...], serve_batch: int, calls: int = 50, device: str | None = None, seconds: float = 1.0) -> dict[str, float | None]:
    """One model's serving cost (`measure_serving_all` of it alone)."""
    return measure_serving_all({"model": (model, device)}, input_shape, serve_batch, calls, seconds)["model"]


def measure_serving_all(models: dict[str, tuple[Any, str | None]], input_shape: tuple[int, ...], serve_batch: int, calls: int = 50,
                        seconds: float = 1.0) -> dict[str, dict[str, float | None]]:
    """Each model's (key: (model, its device)) latency (ms) at batch 1, images/s at `serve_batch`
    and the memory a call at `serve_batch` adds at its peak (MB). Batch 1's calls interleaved across
    the models (`_interleaved_calls`); the serving batch's timed model by model, each call's memory
    measured alone and the median taken, so that what another thread allocates during one call (a
    tf.data pipeline refilling its buffers: a 4 MB output read 17.0 MB with one beside it) is not
    counted."""
    figures = {}
    with _no_garbage_collection():
        infers, ones, devices = serving_functions(models, input_shape)
        singles = _interleaved_calls(infers, devices, ones, calls)
        for key, (_, device) in models.items():
            with on_device(device):
                batch = tf.zeros((serve_batch, *input_shape), tf.float32)
                whole = PeakMemory(device)  # the resident set's window, where TensorFlow keeps no peak
                batched, call_mb = _timed_calls(infers[key], batch, most=max(3, calls // 5), least=3, seconds=seconds, allocator=whole.device)
                added_mb = statistics.median(call_mb) if call_mb else whole.added_mb()
            figures[key] = {
                "latency_ms": round(1000 * statistics.median(singles[key]), 3),
                "latency_p90_ms": round(1000 * float(np.percentile(singles[key], 90)), 3),
                "serve_images_per_s": round(serve_batch / statistics.median(batched), 1),
                "serve_peak_mb": None if added_mb is None else round(added_mb, 1),
            }
    return figures


def serving_functions(models: dict[str, tuple[Any, str | None]], input_shape: tuple[int, ...]) -> tuple[dict, dict, dict]:
    """For each model (key: (model, its device)): its serving function, an image at batch 1 on its
    device (as a served request's is) and the device."""
    infers, ones = {}, {}
    for key, (model, device) in models.items():
        with on_device(device):
            infers[key] = serving_function(model, input_shape)
            ones[key] = tf.zeros((1, *input_shape), tf.float32)
    return infers, ones, {key: device for key, (_, device) in models.items()}


def _interleaved_calls(infers: dict[str, Any], devices: dict[str, str | None], images: dict[str, Any], calls: int) -> dict[str, list[float]]:
    """`calls` timed calls of each function on its `images`, after its warm-up, in LATENCY_ROUNDS
    rounds (fewer when there are fewer calls): each round times every function in turn, starting
    one further along the list each round, so that no model is always timed first or after the
    same one. After another model's calls, a model's first call is not timed (its caches are the
    other's then); alone, its calls run back to back as before."""
    keys = list(infers)
    for key in keys:
        with on_device(devices[key]):
            for _ in range(WARMUP_CALLS):
                infers[key](images[key]).numpy()
    rounds = max(1, min(LATENCY_ROUNDS, calls))
    times: dict[str, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        in_round = calls // rounds + (r < calls % rounds)
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            with on_device(devices[key]):
                if len(keys) > 1:
                    infers[key](images[key]).numpy()
                for _ in range(in_round):
                    began = time.perf_counter()
                    infers[key](images[key]).numpy()
                    times[key].append(time.perf_counter() - began)
    return times


@contextlib.contextmanager
def _no_garbage_collection():
    """Python's cyclic garbage collector paused, as `timeit` pauses it, for two reasons. Memory: a
    collection freeing tensors that were garbage before the measurement began lowered the
    allocator's current below the measurement's start and the peak above it with them (a 2 MB
    tensor held by a reference cycle made a 16 MB output read 14.0 MB; in CI, after other tests,
    15.9). Time: a full collection of a trained run's process (340,000 objects with two
    segmentation networks built: 0.16 s) inside a 1 ms call is its p90 latency. Collecting first
    instead would cost those 0.16 s per model."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def inference_function(model, batch_shape: tuple):
    """The model's forward pass in inference mode, compiled for images of `batch_shape` (a None
    batch: any batch size)."""
    spec = tf.TensorSpec(batch_shape, tf.float32)
    return tf.function(lambda images: model(images, training=False), input_signature=[spec])


def serving_function(model, input_shape: tuple[int, ...]):
    """The model's inference as a served SavedModel runs it: one graph for any batch size (the
    batch dimension unknown when traced), so batch 1 and the serving batch share one trace. Two
    traces of fixed batch sizes cost one more trace per network (0.04-0.09 s for smoke's tiny
    networks, 0.2-0.9 s for the quickstart's) and measured a graph no export serves. No model
    meets an unknown batch here first: validation's function is traced with one (its last batch
    may be short)."""
    return inference_function(model, (None, *input_shape))


def _timed_calls(infer, images, most: int, least: int, seconds: float, allocator: str | None = None) -> tuple[list[float], list[float]]:
    """At most `most` timed calls; after `least` of them, stop once they took `seconds`. With an
    `allocator` device ("CPU:0"), also the memory each call added at its peak (MB), read outside
    the timed part."""
    # The first call of a batch size sets up its kernels (the first call of all also traces);
    # the next settle caches and threads.
    for _ in range(WARMUP_CALLS):
        infer(images).numpy()
    times: list[float] = []
    peaks_mb: list[float] = []
    while len(times) < most and (len(times) < least or sum(times) < seconds):
        peak = PeakMemory(allocator) if allocator is not None else None
        began = time.perf_counter()
        infer(images).numpy()
        times.append(time.perf_counter() - began)
        if peak is not None and (added := peak.added_mb()) is not None:
            peaks_mb.append(added)
    return times, peaks_mb


def exported_mb(folder: Path) -> float | None:
    """The size of a member's exported model: model.keras, or with `export_formats: [saved_model]`
    alone the SavedModel folder's files; None when nothing was exported."""
    if (keras_file := folder / "model.keras").is_file():
        return round(keras_file.stat().st_size / 2**20, 3)
    saved = [f for f in (folder / "model_saved_model").rglob("*") if f.is_file()]
    return round(sum(f.stat().st_size for f in saved) / 2**20, 3) if saved else None


class PeakMemory:
    """Memory a measurement adds at its peak: TensorFlow's allocator for the device (GPU or CPU),
    else the process's peak resident set (Linux); None where neither can be read.

    Why the allocator on a CPU too: the resident set measured what the process had to ask the
    system for, and TensorFlow's CPU allocator reuses what training freed, so the quickstart's four
    networks read 0.0, 206.5, 0.1 and 7.4 MB at batch 8 (one run); the allocator's peak reads
    20.2, 72.0, 12.7 and 27.9-29.6 MB for the same networks, measured twice (over the whole
    measurement, as harness 0.3.2-0.3.5 read it).

    The peak is counted from the current at its start, so memory held before it and freed during
    it lowers the figure, and it is the process's allocator, so what another thread allocates
    during it raises the figure: `measure_serving` pauses the garbage collector around it and
    takes the median of windows of one call each."""

    def __init__(self, device: str | None):
        self.device: str | None = _allocator_device(device)
        self.start: float | None = None
        try:
            tf.config.experimental.reset_memory_stats(self.device)
            self.start = tf.config.experimental.get_memory_info(self.device)["current"]
        except (ValueError, RuntimeError, tf.errors.OpError):  # TensorFlow keeps no peak for this device
            self.device = None
            if _reset_peak_rss():
                self.start = _rss_kb("VmRSS")

    def added_mb(self) -> float | None:
        if self.start is None:
            return None
        if self.device is not None:
            return max(0.0, (tf.config.experimental.get_memory_info(self.device)["peak"] - self.start) / 2**20)
        peak = _rss_kb("VmHWM")
        return None if peak is None else max(0.0, (peak - self.start) / 1024)


def _allocator_device(device: str | None) -> str:
    """The device whose allocator the model's calls use: "GPU:1" for "/gpu:1"; unpinned, the first
    GPU, else the CPU (logical CPUs share one allocator)."""
    if device:
        name = tf.DeviceSpec.from_string(device)
        return f"{(name.device_type or 'CPU').upper()}:{name.device_index or 0}"
    return "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
        return True
    except OSError:
        return False


def _rss_kb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None
