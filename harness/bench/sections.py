"""The bench's sections: each times its contenders and returns rows of bench.csv (see
`harness.bench.bench` for what each section measures)."""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

from harness.core.backend import import_keras, import_tf
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError
from harness.bench.contenders import (
    Contender, _members, fit_one_after_another, fused_end_to_end, make_fused_contender, make_input_contenders,
    make_hand_loop_contender, make_variant_contender, one_device_strategy_placement, pipeline_ms_per_batch,
)
from harness.bench.suites import TINY
from harness.bench.timing import _section, _with, alternate, child_figures, ratios_to

tf = import_tf()




def bench_loop(base, rounds, steps) -> pd.DataFrame:
    config = _with(base)
    unchecked = _with(base, train={"isolate_divergence": False})
    contenders = [
        make_hand_loop_contender(config),
        make_fused_contender(config, "harness_k1", 1),
        make_fused_contender(unchecked, "harness_k1_no_isolation", 1),
        make_fused_contender(config, "harness_k10", 10),
        make_fused_contender(config, "harness_k10_switched", 10, switched=True),  # the step as a run builds it
    ]
    table = ratios_to(alternate(contenders, rounds, steps), "hand_loop")
    table["trace_s"] = [round(c.trace_s, 2) for c in contenders]
    table["goal"] = ["", "ratio <= 1.02", "ratio <= 1.02", "", ""]
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
from harness.bench.contenders import make_fused_contender, tf
from harness.bench.sections import rss_mb
from harness.bench.timing import _with
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
    rows = []
    for n in range(1, max_n + 1):
        measured = child_figures([sys.executable, "-c", _MEMORY_SCRIPT, json.dumps(base), str(n)], f"memory probe for N={n}", timeout=900)
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
    """The input pipeline's share of the fused step's time, with the suite's pipeline and the
    expensive one (`input_share_row`)."""
    rows = [input_share_row(label, _with(base), rounds, steps, expensive) for label, expensive in (("suite pipeline", False), ("expensive pipeline", True))]
    for row in rows:
        row["goal"] = "ratio < 0.05" if row["contender"] == "suite pipeline" else ""
    return _section("input", rows)


def input_share_row(label: str, config, rounds: int, steps: int, expensive: bool = False, scan=None) -> dict:
    """The input pipeline's share of the fused step's time, by difference as the runner's probe
    does but over `rounds`: the same compiled loop on the real pipeline and on a few of its batches
    held in memory, alternating; share = 1 - t(in memory) / t(real), floored at 0, with the interval of
    the median ratio (`share_high`: the largest share noise leaves possible)."""
    real, in_memory = make_input_contenders(config, steps, expensive, scan)
    table = ratios_to(alternate([real, in_memory], rounds, steps), "real").set_index("contender")
    return {
        "contender": label,
        "median_ms_per_step": table.loc["real", "median_ms_per_step"],
        "in_memory_ms_per_step": table.loc["in_memory", "median_ms_per_step"],
        "ratio": round(max(0.0, 1.0 - table.loc["in_memory", "ratio"]), 4),
        "share_high": round(max(0.0, 1.0 - table.loc["in_memory", "ratio_low"]), 4),
        "baseline": "share of step time",
    }


def bench_checkpoint(base, saves: int, folder: Path) -> pd.DataFrame:
    from harness.training import checkpoints as ckpt

    config = _with(base)
    contender = make_fused_contender(config, "one_device")
    step_ms = statistics.median(alternate([contender], 3, 2)["ms_per_step"])
    _, members, step = _members(config)
    checkpoint = ckpt.make_checkpoint(members, step, token="bench")
    times = []
    for i in range(saves):
        began = time.perf_counter()
        ckpt.save(checkpoint, folder / "ckpt", i + 1)
        ckpt.delete(folder / "ckpt", [i])
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


