"""`harness bench`: what the fused step is worth, measured side by side in one process.

Contenders are timed alternately (A B C A B C ...), each on its own copy of the same models, fed
the same batches, and the figure quoted is the median over rounds of the per-round ratio to the
baseline: a slow moment of the machine hits every contender alike. Tracing is timed apart.

Sections (rows of bench.csv):
  loop       the harness's fused step vs a hand-written multi-tape tf.function loop (seed 003's
             pattern), one step per call; and the harness at 10 steps per call
  overhead   where the harness's 1-step-per-call cost goes: from the hand loop, the batch taken
             inside the function, then the member's step; the earlier forms (graph loop around
             one step, OneDeviceStrategy on the CPU); and the hand loop against itself (noise)
  dispatch   the fixed cost per call of the same contenders, on models so small (16x16, batch 2)
             that a call is almost all dispatch
  fit        the same N models trained one after another with model.fit: per step, and end to
             end including tracing
  pipeline   both again with an expensive input pipeline (PNG decode of 4x larger images, resize,
             augmentation): the fused step runs it once for N models; measured saving vs the
             saving its cost predicts
  compile    trace time of the fused step vs the sum of the N single-model traces (after a
             warm-up trace, reported apart: the process's one-time costs)
  scaling    N = 1..6 models: fused step time vs the sum of single-model step times
  memory     resident memory added by building and training N models, each N in its own process
             (the process peak is set by TensorFlow's start-up, not by the models); with a GPU,
             also TensorFlow's peak GPU memory
  placement  each strategy vs one device (on two logical CPUs: an overhead check only)
  checkpoint one save of every model and optimizer, and its share of step time
  input      the share of step time spent waiting for input (suite and expensive pipelines)
  gpu        with --gpu on a machine with GPUs: float32 vs mixed_float16, XLA, mirrored vs per_model
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .backend import import_keras, import_tf
from .config import ExperimentConfig, validate_config
from .errors import ConfigError, HarnessError

tf = import_tf()


@dataclass
class Contender:
    name: str
    call: Callable[[int], None]  # run n steps and wait for them to finish
    trace_s: float


# ---------------------------------------------------------------------------------------------
# Contenders


def _members(config: ExperimentConfig, placement=None):
    from .members import build_members
    from .runtime import build_placement

    placement = placement or build_placement(config)
    with placement.strategy.scope():
        members = build_members(config, placement.model_devices)
        step = tf.Variable(0, dtype=tf.int64)
    return placement, members, step


def one_device_strategy_placement():
    """one_device on the CPU as it was before single-replica placements bypassed the strategy:
    through tf.distribute.OneDeviceStrategy's iterator and strategy.run."""
    from .runtime import Placement

    return Placement(tf.distribute.OneDeviceStrategy("/cpu:0"), plan={"strategy": "one_device"})


def _endless_batches(config: ExperimentConfig, expensive: bool = False):
    from .data import build_datasets

    dataset = build_datasets(config.data, config.seed, 0, 10**9).train
    return expensive_pipeline(dataset) if expensive else dataset


def make_fused_contender(config: ExperimentConfig, name: str, steps_per_call: int = 1, expensive: bool = False, in_memory: bool = False, graph_loop: bool = False, placement=None) -> Contender:
    """The harness's own fused loop, `steps_per_call` steps per compiled call; `in_memory`: fed a
    few of the pipeline's batches held in memory (input for free); `graph_loop`: at one step per
    call, use the graph-loop form anyway (what a run compiled for k > 1 does for a 1-step call);
    `placement`: instead of the config's."""
    from .step import make_train_loop

    placement, members, step = _members(config, placement)
    batches = _endless_batches(config, expensive)
    if in_memory:
        batches = batches.take(4).cache().repeat()
    iterator = placement.input_iterator(batches)
    compiled_for = max(steps_per_call, 2) if graph_loop else steps_per_call
    loop = make_train_loop(members, placement, step, config.data.batch_size, compiled_for)

    def call(n: int) -> None:
        for _ in range(max(1, n // steps_per_call)):
            tf.nest.map_structure(lambda t: t.numpy(), loop(iterator, steps_per_call))

    began = time.perf_counter()
    call(steps_per_call)
    return Contender(name, call, time.perf_counter() - began)


def seed003_step(member, images, masks):
    """One model's step as seed 003 writes it: a tape, the mean loss, apply_gradients."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(member.loss_fn(masks, member.model(images, training=True)))
    gradients = tape.gradient(loss, member.model.trainable_variables)
    member.optimizer.apply_gradients(zip(gradients, member.model.trainable_variables))
    return loss


def make_hand_loop_contender(config: ExperimentConfig, name: str = "hand_loop") -> Contender:
    """Seed 003's script: one tf.function, a GradientTape and an optimizer per model, a batch fed
    per call from Python, every loss read back each step (it prints them)."""
    _, members, _ = _members(config)
    iterator = iter(_endless_batches(config))

    @tf.function
    def train(images, masks):
        return [seed003_step(m, images, masks) for m in members]

    def call(n: int) -> None:
        for _ in range(n):
            images, masks = next(iterator)
            [float(v) for v in train(images, masks)]

    began = time.perf_counter()
    call(1)
    return Contender(name, call, time.perf_counter() - began)


def make_variant_contender(config: ExperimentConfig, name: str, fragment: str) -> Contender:
    """One step per call, the batch taken inside the compiled function, members called directly:
    `fragment` is "hand" (seed 003's tape + apply_gradients) or "member" (the harness's member
    step: loss over the global batch, finiteness check, skip-if-not-finite, diverged flags)."""
    _, members, step = _members(config)
    iterator = iter(_endless_batches(config))

    def member_step(member, images, masks):
        if fragment == "hand":
            return {"loss": seed003_step(member, images, masks)}
        return member.train_step(images, masks, config.data.batch_size, step + 1)

    @tf.function
    def one(iterator):
        images, masks = next(iterator)
        return {m.name: member_step(m, images, masks) for m in members}

    def call(n: int) -> None:
        for _ in range(n):
            tf.nest.map_structure(lambda t: t.numpy(), one(iterator))

    began = time.perf_counter()
    call(1)
    return Contender(name, call, time.perf_counter() - began)


def fit_one_after_another(config: ExperimentConfig, steps: int, expensive: bool = False) -> dict[str, float]:
    """Each model compiled and trained alone with model.fit, one after another, each with its own
    pass over the input pipeline. Returns end-to-end seconds (building and tracing included, as
    for the harness) and steady ms/step."""
    began = time.perf_counter()
    _, members, _ = _members(config)
    total = time.perf_counter() - began
    steady_ms = 0.0
    for member in members:
        dataset = _endless_batches(config, expensive)
        member.model.compile(optimizer=member.optimizer, loss=lambda y, p, f=member.loss_fn: f(y, p))
        began = time.perf_counter()
        member.model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        total += time.perf_counter() - began
        began = time.perf_counter()
        member.model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)  # traced already
        steady_ms += 1000 * (time.perf_counter() - began) / steps
    return {"end_to_end_s": total, "ms_per_step": steady_ms}


def fused_end_to_end(config: ExperimentConfig, steps: int, expensive: bool = False) -> dict[str, float]:
    """The harness as a run uses it: all models built, one trace, `train.steps_per_call` steps per
    call. Returns end-to-end seconds and steady ms/step, as fit_one_after_another."""
    began = time.perf_counter()
    k = min(config.train.steps_per_call, steps)
    contender = make_fused_contender(config, "fused", k, expensive)  # builds, traces, runs k steps
    if steps > k:
        contender.call(steps - k)
    total = time.perf_counter() - began
    began = time.perf_counter()
    contender.call(steps)
    return {"end_to_end_s": total, "ms_per_step": 1000 * (time.perf_counter() - began) / steps, "trace_s": contender.trace_s}


def expensive_pipeline(dataset, scale: int = 4):
    """What a real pipeline costs: source images larger than the training size (here `scale` x per
    side), PNG-decoded, resized down and augmented (flip, rotation, brightness/contrast), per
    example, on the host, one example at a time."""

    def per_example(image, mask):
        height, width, channels = image.shape
        big = tf.image.resize(image, [height * scale, width * scale])
        encoded = tf.io.encode_png(tf.cast(tf.clip_by_value(big, 0.0, 1.0) * 255.0, tf.uint8))  # the file on disk
        decoded = tf.cast(tf.io.decode_png(encoded, channels=channels), tf.float32) / 255.0
        decoded = tf.image.resize(decoded, [height, width], antialias=True)
        decoded = tf.image.adjust_contrast(tf.image.adjust_brightness(decoded, 0.05), 1.1)
        both = tf.image.rot90(tf.image.flip_left_right(tf.concat([decoded, mask], axis=-1)), k=1)
        return both[..., :channels], both[..., channels:]

    def per_batch(images, masks):
        return tf.map_fn(lambda pair: per_example(*pair), (images, masks), fn_output_signature=(images.dtype, masks.dtype))

    return dataset.map(per_batch, num_parallel_calls=1)


def pipeline_ms_per_batch(config: ExperimentConfig, batches: int, expensive: bool) -> float:
    iterator = iter(_endless_batches(config, expensive))
    next(iterator)
    began = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return 1000 * (time.perf_counter() - began) / batches


# ---------------------------------------------------------------------------------------------
# Timing


def alternate(contenders: list[Contender], rounds: int, steps: int) -> pd.DataFrame:
    """Rows (round, contender, ms_per_step), contenders interleaved within every round. The order
    rotates from round to round (A B C, B C A, C A B, ...): every contender runs in every position
    equally often, so a cost that depends on what ran just before (caches, thread pools warmed by
    another contender's models) does not favour one of them."""
    rows = []
    for r in range(rounds):
        shift = r % len(contenders)
        for c in contenders[shift:] + contenders[:shift]:
            began = time.perf_counter()
            c.call(steps)
            rows.append({"round": r, "contender": c.name, "ms_per_step": 1000 * (time.perf_counter() - began) / steps})
    return pd.DataFrame(rows)


def ratios_to(timings: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per contender: median ms/step, the median over rounds of its per-round ratio to the
    baseline, and a 90% bootstrap interval of that median (how far noise could move it)."""
    wide = timings.pivot(index="round", columns="contender", values="ms_per_step")
    out = []
    for name in timings["contender"].unique():  # contenders in the order they were given
        ratios = (wide[name] / wide[baseline]).to_numpy()
        low, high = bootstrap_median_interval(ratios)
        out.append(
            {
                "contender": name,
                "median_ms_per_step": round(float(wide[name].median()), 3),
                "ratio": round(float(statistics.median(ratios)), 4),
                "ratio_low": round(low, 4),
                "ratio_high": round(high, 4),
                "baseline": baseline,
            }
        )
    return pd.DataFrame(out)


def bootstrap_median_interval(values, confidence: float = 0.9, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The interval holding the median of `values` in `confidence` of resamples with replacement."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, size=(resamples, len(values)), replace=True), axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(medians, tail)), float(np.quantile(medians, 1 - tail))


def _section(name: str, rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    table.insert(0, "section", name)
    return table


def _with(base: dict[str, Any], **changes) -> ExperimentConfig:
    raw = json.loads(json.dumps(base))
    for key, value in changes.items():
        if isinstance(value, dict):
            raw.setdefault(key, {}).update(value)
        else:
            raw[key] = value
    return validate_config(raw)


# ---------------------------------------------------------------------------------------------
# Sections


def bench_loop(base, rounds, steps) -> pd.DataFrame:
    config = _with(base)
    unchecked = _with(base, train={"isolate_divergence": False})
    contenders = [
        make_hand_loop_contender(config),
        make_fused_contender(config, "harness_k1", 1),
        make_fused_contender(unchecked, "harness_k1_no_isolation", 1),
        make_fused_contender(config, "harness_k10", 10),
    ]
    table = ratios_to(alternate(contenders, rounds, steps), "hand_loop")
    table["trace_s"] = [round(c.trace_s, 2) for c in contenders]
    table["goal"] = ["", "ratio <= 1.02", "ratio <= 1.02", ""]
    return _section("loop", table)


def bench_overhead(base, rounds, steps) -> pd.DataFrame:
    """Where the 1-step-per-call cost goes, one change at a time from the hand loop; and the two
    forms the harness used before (a graph loop around one step; OneDeviceStrategy's iterator and
    strategy.run on the CPU)."""
    contenders = overhead_contenders(_with(base), null_ratio=True)
    return _section("overhead", ratios_to(alternate(contenders, rounds, steps), "hand_loop"))


def overhead_contenders(config: ExperimentConfig, null_ratio: bool) -> list[Contender]:
    """From the hand loop to the harness one change at a time, then the harness's earlier forms;
    `null_ratio`: a second copy of the hand loop, to show what noise looks like."""
    contenders = [make_hand_loop_contender(config)]
    if null_ratio:
        contenders.append(make_hand_loop_contender(config, "hand_loop_again"))
    return contenders + [
        make_variant_contender(config, "hand_fragment_batch_inside", "hand"),
        make_variant_contender(config, "member_fragment_batch_inside", "member"),
        make_fused_contender(config, "harness_k1", 1),
        make_fused_contender(config, "harness_k1_graph_loop", 1, graph_loop=True),
        make_fused_contender(config, "harness_k1_one_device_strategy", 1, placement=one_device_strategy_placement()),
    ]


def bench_dispatch(base, rounds) -> pd.DataFrame:
    """The fixed cost per compiled call, on models so small (16x16, batch 2) that a call is almost
    all dispatch: the overhead contenders' ms per call, and what each adds to the hand loop's."""
    tiny = {**base, "data": {**base["data"], "image_size": [16, 16], "batch_size": 2}, "models": TINY["models"]}
    contenders = overhead_contenders(_with(tiny), null_ratio=False)
    table = ratios_to(alternate(contenders, rounds, 50), "hand_loop")
    table["extra_ms_per_call"] = (table["median_ms_per_step"] - table["median_ms_per_step"].iloc[0]).round(3)
    return _section("dispatch", table)


def bench_fit(base, steps, rounds: int) -> pd.DataFrame:
    """Sections `fit` and `pipeline`: the harness vs the same models trained one after another with
    model.fit, with the plain pipeline and with an expensive one, each contender from scratch
    (build, trace, `steps` steps) `rounds` times, alternating. The pipeline's own cost is isolated
    by difference: what it adds to each contender's step."""
    config = _with(base)
    n = len(config.models)
    contenders = {"harness": fused_end_to_end, "fit_one_after_another": fit_one_after_another}
    runs = {
        (who, expensive): [] for expensive in (False, True) for who in contenders
    }
    for expensive in (False, True):
        for _ in range(rounds):
            for who, measure in contenders.items():
                runs[who, expensive].append(measure(config, steps, expensive))

    def median(who, expensive, key):
        return statistics.median(r[key] for r in runs[who, expensive])

    def median_ratio(who, expensive, key):
        return statistics.median(r[key] / h[key] for r, h in zip(runs[who, expensive], runs["harness", expensive]))

    rows = []
    for expensive, section in ((False, "fit"), (True, "pipeline")):
        for who in contenders:
            rows.append(
                {
                    "section": section, "contender": who, "baseline": "harness",
                    "median_ms_per_step": round(median(who, expensive, "ms_per_step"), 3),
                    "end_to_end_s": round(median(who, expensive, "end_to_end_s"), 2),
                    "ratio": round(median_ratio(who, expensive, "ms_per_step"), 4),
                    "end_to_end_ratio": round(median_ratio(who, expensive, "end_to_end_s"), 4),
                    "rounds": rounds,
                    "goal": "end_to_end_ratio > 1 (harness faster)" if who != "harness" else "",
                }
            )
    cost = pipeline_ms_per_batch(config, 10, True) - pipeline_ms_per_batch(config, 10, False)
    added = {who: median(who, True, "ms_per_step") - median(who, False, "ms_per_step") for who in contenders}
    predicted = (n - 1) * cost  # one after another pays the extra pipeline cost n times, the harness once
    measured = added["fit_one_after_another"] - added["harness"]
    rows.append(
        {
            "section": "pipeline", "contender": "saving_measured_vs_predicted", "baseline": "predicted",
            "pipeline_ms_per_batch": round(cost, 3), "predicted_saving_ms_per_step": round(predicted, 3),
            "measured_saving_ms_per_step": round(measured, 3),
            "ratio": round(measured / predicted, 4) if predicted > 0 else float("nan"), "goal": "ratio >= 0.8",
        }
    )
    return pd.DataFrame(rows)


def bench_compile(base, rounds: int = 3) -> pd.DataFrame:
    """Trace time (first call minus a traced call) of the fused step vs the sum of the N single-model
    steps, in the compiled form a run uses. A warm-up trace first takes the process's one-time
    costs (oneDNN kernels for these shapes, Grappler start-up); then fused and singles alternate,
    order reversed every round; medians over rounds."""
    config = _with(base)
    k = config.train.steps_per_call  # a graph loop unless k is 1

    def trace_s(config) -> float:
        contender = make_fused_contender(config, "trace", k)
        began = time.perf_counter()
        contender.call(k)
        return contender.trace_s - (time.perf_counter() - began)

    first = trace_s(config)  # warm-up: what the first trace in a process costs, not compared
    fused, singles = [], []
    for r in range(rounds):
        order = ["fused", "singles"] if r % 2 == 0 else ["singles", "fused"]
        for who in order:
            if who == "fused":
                fused.append(trace_s(config))
            else:
                singles.append(sum(trace_s(_with(base, models=[m])) for m in base["models"]))
    fused_s, singles_s = statistics.median(fused), statistics.median(singles)
    return _section(
        "compile",
        [
            {"contender": "fused_trace", "trace_s": round(fused_s, 2), "ratio": 1.0, "baseline": "fused_trace"},
            {"contender": "sum_of_single_traces", "trace_s": round(singles_s, 2), "ratio": round(singles_s / fused_s, 4), "baseline": "fused_trace"},
            {"contender": "first_fused_trace_in_process", "trace_s": round(first, 2), "ratio": round(first / fused_s, 4), "baseline": "fused_trace"},
        ],
    )


def bench_scaling(base, rounds, steps, max_n: int) -> pd.DataFrame:
    model = base["models"][0]
    single = make_fused_contender(_with(base, models=[model]), "n1")
    single_ms = statistics.median(alternate([single], rounds, steps)["ms_per_step"])
    rows = []
    for n in range(1, max_n + 1):
        copies = [{**model, "name": f"m{i}"} for i in range(n)]
        fused = make_fused_contender(_with(base, models=copies), f"fused_{n}")
        timings = alternate([single, fused], rounds, steps)
        wide = timings.pivot(index="round", columns="contender", values="ms_per_step")
        ratio = statistics.median(wide[f"fused_{n}"] / (n * wide["n1"]))
        rows.append(
            {
                "contender": f"N={n}",
                "median_ms_per_step": round(float(wide[f"fused_{n}"].median()), 3),
                "sum_of_single_ms": round(n * single_ms, 3),
                "ratio": round(float(ratio), 4),
                "baseline": "N x single",
                "trace_s": round(fused.trace_s, 2),
            }
        )
    return _section("scaling", rows)


_MEMORY_SCRIPT = """
import json, sys
from harness.bench import make_fused_contender, _with, rss_mb, tf
base = json.loads(sys.argv[1]); n = int(sys.argv[2])
model = base["models"][0]
config = _with(base, models=[{**model, "name": f"m{i}"} for i in range(n)], placement={"strategy": "one_device"})
before = rss_mb()
make_fused_contender(config, "x").call(3)
gpus = tf.config.list_logical_devices("GPU")
peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20 if gpus else None
print(json.dumps({"before": before, "after": rss_mb(), "gpu_peak_mb": peak}))
"""


def rss_mb() -> float:
    """Resident memory of this process now (Linux /proc), in MB."""
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kb / 1024


def bench_memory(base, max_n: int) -> pd.DataFrame:
    """Peak RSS of a fresh process per N: one process can only grow, so it cannot compare N's."""
    from .backend import user_environment

    rows = []
    for n in range(1, max_n + 1):
        done = subprocess.run(
            [sys.executable, "-c", _MEMORY_SCRIPT, json.dumps(base), str(n)],
            capture_output=True, text=True, timeout=900, env=user_environment(),
        )
        if done.returncode:
            raise RuntimeError(f"memory probe for N={n} failed: {done.stderr[-500:]}")
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "contender": f"N={n}",
                "rss_mb": round(measured["after"], 1),
                "model_rss_mb": round(measured["after"] - measured["before"], 1),  # models, optimizers, step, graph
            }
        )
        if measured["gpu_peak_mb"] is not None:  # on a GPU the models live there: TensorFlow's own count
            rows[-1]["gpu_peak_mb"] = round(measured["gpu_peak_mb"], 1)
    base_mb = rows[0]["model_rss_mb"]
    for row in rows:
        row["ratio"] = round(row["model_rss_mb"] / base_mb, 4) if base_mb > 0 else float("nan")
        row["baseline"] = "N=1"
    return _section("memory", rows)


def bench_placement(base, rounds, steps) -> pd.DataFrame:
    contenders = [
        make_fused_contender(_with(base, placement={"strategy": s, "logical_cpus": 2}), s)
        for s in ("one_device", "mirrored", "per_model")
    ]
    table = ratios_to(alternate(contenders, rounds, steps), "one_device")
    table["trace_s"] = [round(c.trace_s, 2) for c in contenders]
    return _section("placement", table)


def bench_input(base, rounds: int, steps: int) -> pd.DataFrame:
    """The input pipeline's share of the fused step's time, by difference as the runner's probe
    does: the same loop on the real pipeline and on a few of its batches held in memory,
    alternating; share = 1 - t(in memory) / t(real). With the suite's pipeline and the expensive one."""
    rows = []
    for label, expensive in (("suite pipeline", False), ("expensive pipeline", True)):
        config = _with(base)
        real = make_fused_contender(config, "real", steps, expensive)
        in_memory = make_fused_contender(config, "in_memory", steps, expensive, in_memory=True)
        table = ratios_to(alternate([real, in_memory], rounds, steps), "real").set_index("contender")
        rows.append(
            {
                "contender": label,
                "median_ms_per_step": table.loc["real", "median_ms_per_step"],
                "in_memory_ms_per_step": table.loc["in_memory", "median_ms_per_step"],
                "ratio": round(max(0.0, 1.0 - table.loc["in_memory", "ratio"]), 4),
                "baseline": "share of step time",
                "goal": "ratio < 0.05" if not expensive else "",
            }
        )
    return _section("input", rows)


def bench_checkpoint(base, saves: int, folder: Path) -> pd.DataFrame:
    from . import checkpoints as ckpt

    config = _with(base)
    contender = make_fused_contender(config, "one_device")
    step_ms = statistics.median(alternate([contender], 3, 2)["ms_per_step"])
    _, members, step = _members(config)
    checkpoint = ckpt.make_checkpoint(members, step)
    times = []
    for i in range(saves):
        began = time.perf_counter()
        ckpt.save(checkpoint, folder / "ckpt", i + 1, keep=1)
        times.append(1000 * (time.perf_counter() - began))
    save_ms = statistics.median(times)
    steps_per_epoch = config.data.train_size // config.data.batch_size
    return _section(
        "checkpoint",
        [
            {
                "contender": "save all models",
                "median_ms_per_step": round(step_ms, 3),
                "save_ms": round(save_ms, 1),
                "ratio": round(save_ms / (steps_per_epoch * step_ms), 4),
                "baseline": "step time of one epoch",
            }
        ],
    )


def bench_gpu(base, rounds, steps, kind: str = "GPU") -> pd.DataFrame:
    """On GPUs: float32 vs mixed_float16, XLA for the models that compile, and with several GPUs
    data-parallel (mirrored) vs one model per GPU (per_model). `kind="CPU"` runs the same
    contenders on the logical CPUs: figures that mean nothing, only a check that the section
    works on a machine without GPUs (the tests run it so)."""
    devices = [d.name for d in tf.config.list_logical_devices(kind)]
    if not devices:
        raise ConfigError(f"bench --gpu needs a {kind}, and this machine has none")
    one = {"strategy": "one_device", "device": devices[0]}
    contenders = [make_fused_contender(_with(base, placement=one), "float32")]
    with _precision("mixed_float16"):  # layers take the policy when built
        contenders.append(make_fused_contender(_with(base, placement={**one, "precision": "mixed_float16"}), "mixed_float16"))
    compiling = [m["name"] for m in base["models"] if xla_compiles(base, m, one)]
    if compiling:
        models = [{**m, "jit_compile": m["name"] in compiling} for m in base["models"]]
        contenders.append(make_fused_contender(_with(base, placement=one, models=models), "xla"))
    if len(devices) > 1:
        for strategy in ("mirrored", "per_model"):
            contenders.append(make_fused_contender(_with(base, placement={"strategy": strategy, "devices": devices}), strategy))
    table = ratios_to(alternate(contenders, rounds, steps), "float32")
    table["trace_s"] = [round(c.trace_s, 2) for c in contenders]
    table["xla_models"] = [", ".join(compiling) if c.name == "xla" else "" for c in contenders]
    if kind == "GPU":
        table["peak_gpu_mb"] = round(tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20, 1)
    return _section("gpu", table)


@contextlib.contextmanager
def _precision(policy: str):
    """The Keras global precision policy for what is built inside, float32 again after."""
    keras = import_keras()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def xla_compiles(base, model: dict, placement: dict) -> bool:
    """Whether XLA compiles this model's training step on the device (nearest-neighbour upsampling,
    for one, has no XLA gradient kernel on CPU)."""
    try:
        make_fused_contender(_with(base, placement=placement, models=[{**model, "jit_compile": True}]), "xla_check")
        return True
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError):
        return False


# ---------------------------------------------------------------------------------------------
# Suites

TINY = {
    "name": "bench",
    "seed": 0,
    "data": {"image_size": [32, 32], "train_size": 64, "val_size": 8, "batch_size": 8},
    "models": [{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet"}],
}

# Three built-in models big enough that a step is real work on a CPU, small enough that the whole
# suite takes minutes: the fixed costs the fused step removes (Python, host syncs, the input
# pipeline) are then visible, as they are for small models on a GPU.
STANDARD = {
    "name": "bench",
    "seed": 0,
    "data": {"image_size": [64, 64], "train_size": 256, "val_size": 8, "batch_size": 8},
    "models": [
        {"name": "unet", "arch": "tiny_unet", "options": {"width": 16}},
        {"name": "deconv", "arch": "tiny_deconv", "options": {"width": 16}},
        {"name": "fcn", "arch": "tiny_fcn", "options": {"width": 16}},
    ],
}

QUICKSTART = {
    **STANDARD,
    "data": {"image_size": [96, 96], "train_size": 400, "val_size": 8, "batch_size": 8},
    "models": [{"name": n.lower(), "arch": n} for n in ("Unet", "Linknet", "FPN", "PSPNet")],
}

SUITES = {"tiny": TINY, "standard": STANDARD, "quickstart": QUICKSTART}


def _dated_folder(out_dir: Path) -> Path:
    folder = out_dir / datetime.now(timezone.utc).strftime("%Y-%m-%d")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_bench(suite: str, out_dir: Path, rounds: int | None = None, steps: int | None = None, gpu: bool = False, sections: list[str] | None = None) -> pd.DataFrame:
    from .config import PlacementSpec
    from .runtime import configure_devices

    configure_devices(PlacementSpec(logical_cpus=2))  # for the placement section; before any op
    # The bench builds many loops on purpose; TensorFlow would warn about "retracing" each time.
    tf.get_logger().setLevel("ERROR")
    base = SUITES[suite]
    tiny = suite == "tiny"
    rounds = rounds or (2 if tiny else 15)  # run-to-run spread here is ~3%: many rounds
    steps = steps or (2 if tiny else 10)
    max_n = 2 if tiny else 6
    fit_steps = 4 if tiny else 100  # end to end includes tracing: a realistic run is not 10 steps
    folder = _dated_folder(out_dir)
    work = {
        "loop": lambda: bench_loop(base, rounds, steps),
        "overhead": lambda: bench_overhead(base, rounds, steps),
        "dispatch": lambda: bench_dispatch(base, rounds),
        "fit": lambda: bench_fit(base, fit_steps, 1 if tiny else 3),
        "compile": lambda: bench_compile(base, 1 if tiny else 3),
        "scaling": lambda: bench_scaling(base, rounds, steps, max_n),
        "memory": lambda: bench_memory(base, max_n),
        "placement": lambda: bench_placement(base, rounds, steps),
        "checkpoint": lambda: bench_checkpoint(base, 3, folder),
        "input": lambda: bench_input(base, rounds, steps),
    }
    if gpu:
        work["gpu"] = lambda: bench_gpu(base, rounds, steps)
    chosen = sections or list(work)
    unknown = [s for s in chosen if s not in work]
    if unknown:
        raise ConfigError(f"bench: unknown section(s) {unknown}; choose from {', '.join(work)}")
    tables = []
    for name in chosen:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        tables.append(work[name]())
        pd.concat(tables, ignore_index=True).to_csv(folder / "bench.csv", index=False)  # keep partial results
    table = pd.concat(tables, ignore_index=True)
    _save_plots(table, folder)
    return table


def run_bench_processes(suite: str, out_dir: Path, processes: int, rounds: int | None = None, steps: int | None = None, gpu: bool = False, sections: list[str] | None = None) -> pd.DataFrame:
    """The bench `processes` times, each in a fresh process, merged: every figure is the median
    across processes, and `ratio_min`/`ratio_max` show how far they spread.

    Why: within one process, two identical copies of the same contender can differ by up to ~6%
    for the whole process, however many rounds alternate them (likely where their memory and
    threads happen to fall); the `hand_loop_again` row shows it. A fresh process draws again. Every
    process's rows are kept in bench_processes.csv."""
    from .backend import user_environment

    folder = _dated_folder(out_dir)
    tables = []
    for i in range(processes):
        child_out = folder / f".process-{i + 1}"
        command = [sys.executable, "-m", "harness", "bench", "--out", str(child_out)]
        command += ["--tiny"] if suite == "tiny" else ["--suite", suite]
        command += [f"--rounds={rounds}"] * bool(rounds) + [f"--steps={steps}"] * bool(steps) + ["--gpu"] * gpu
        command += [f"--section={name}" for name in sections or []]
        print(f"bench: process {i + 1} of {processes} ...", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, env=user_environment())
        if done.returncode:
            raise HarnessError(f"bench process {i + 1} failed (exit {done.returncode}): {done.stderr[-800:]}")
        (child_csv,) = child_out.glob("*/bench.csv")
        tables.append(pd.read_csv(child_csv).assign(process=i + 1))
        shutil.rmtree(child_out)
    every = pd.concat(tables, ignore_index=True)
    every.to_csv(folder / "bench_processes.csv", index=False)
    table = merge_processes(every)
    table.to_csv(folder / "bench.csv", index=False)
    _save_plots(table, folder)
    return table


def merge_processes(every: pd.DataFrame) -> pd.DataFrame:
    """One row per (section, contender), in first-seen order: numbers are medians across
    processes, text is the first process's; the ratio's spread across processes is added."""
    keys = ["section", "contender"]
    groups = every.groupby(keys, sort=False)
    numeric = [c for c in every.select_dtypes("number").columns if c != "process"]
    merged = groups[numeric].median()
    text = [c for c in every.columns if c not in numeric and c not in keys and c != "process"]
    merged = merged.join(groups[text].first()) if text else merged
    merged["ratio_min"] = groups["ratio"].min()
    merged["ratio_max"] = groups["ratio"].max()
    merged["processes"] = groups.size()
    return merged.reset_index()[[*keys, *[c for c in every.columns if c not in keys and c != "process"], "ratio_min", "ratio_max", "processes"]]


def _save_plots(table: pd.DataFrame, folder: Path) -> None:
    _save_ratio_plot(table, folder)
    _save_scaling_memory_plot(table, folder)


# Sections whose contenders are timed against a baseline in alternation: one bar chart each.
RATIO_SECTIONS = ("loop", "overhead", "dispatch", "placement", "gpu")


def _save_ratio_plot(table: pd.DataFrame, folder: Path) -> None:
    """bench_ratios.png: per section, each contender's median ratio to its baseline with its 90%
    bootstrap interval, and the 1.02 goal line for the harness-vs-hand-loop sections."""
    from .plots import plt, save_figure

    sections = [name for name in RATIO_SECTIONS if name in set(table["section"]) and "ratio_low" in table.columns]
    if not sections:
        return
    heights = [max(1.5, 0.35 * len(table[table["section"] == name])) for name in sections]
    fig, axes = plt.subplots(len(sections), 1, figsize=(9, sum(heights) + 0.6 * len(sections)), gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, name in zip(axes[:, 0], sections):
        rows = table[table["section"] == name].iloc[::-1]
        low = (rows["ratio"] - rows["ratio_low"]).clip(lower=0).fillna(0)
        high = (rows["ratio_high"] - rows["ratio"]).clip(lower=0).fillna(0)
        # Points, not bars: the differences that matter are a few %, invisible on bars from 0.
        ax.errorbar(rows["ratio"], rows["contender"], xerr=[low, high], fmt="o", color="#4c72b0", capsize=3)
        ax.axvline(1.0, color="black", linewidth=0.8)
        if name in ("loop", "overhead"):
            ax.axvline(1.02, color="#c44e52", linestyle="--", linewidth=1, label="goal for harness_k1: 1.02")
            ax.legend(loc="best", fontsize=8)
        ax.set_title(f"{name}: ratio to {rows['baseline'].iloc[0]} (median, 90% interval)", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ratio (lower is faster)")
    fig.tight_layout()
    save_figure(fig, folder, "bench_ratios")


def _save_scaling_memory_plot(table: pd.DataFrame, folder: Path) -> None:
    from .plots import plt, save_figure

    scaling = table[table["section"] == "scaling"]
    memory = table[table["section"] == "memory"]
    if scaling.empty and memory.empty:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if not scaling.empty:
        n = scaling["contender"].str.replace("N=", "").astype(int)
        axes[0].plot(n, scaling["median_ms_per_step"], marker="o", label="fused step")
        axes[0].plot(n, scaling["sum_of_single_ms"], marker="o", linestyle="--", label="N x single-model step")
        axes[0].set_xlabel("models in the step (N)")
        axes[0].set_ylabel("ms per step")
        axes[0].set_title("scaling with N")
        axes[0].legend()
        axes[0].grid(alpha=0.3)
    if not memory.empty:
        n = memory["contender"].str.replace("N=", "").astype(int)
        axes[1].plot(n, memory["model_rss_mb"], marker="o")
        axes[1].set_xlabel("models in the step (N)")
        axes[1].set_ylabel("resident memory added (MB)")
        axes[1].set_title("memory vs N (RSS growth from build to trained)")
        axes[1].grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, folder, "bench")
