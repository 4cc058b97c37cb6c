"""`harness bench`: what the fused step is worth, measured side by side in one process.

Contenders are timed alternately (A B C A B C ...), each on its own copy of the same models, fed
the same batches, and the figure quoted is the median over rounds of the per-round ratio to the
baseline: a slow moment of the machine hits every contender alike. Tracing is timed apart.

Sections (rows of bench.csv):
  loop       the harness's fused step vs a hand-written multi-tape tf.function loop (the one-off script's
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
  statistics the ranking's statistics for 40 members x 500 validation images x 2000 resamples
             (paired bootstrap), and paired tests for 40 models x 5 seeds, on synthetic counts
  calibration  (when named) four small models of close quality trained with 16 seeds (data fixed): for R = 1, 3, 5
             seeds, the coverage of the run's 95% intervals of pair differences against the
             held-out seeds' mean, and the share of supported claims with the wrong sign; whether a
             run of as many held-out seeds as repeats_to_resolve predicts supports the pair, and
             how often all held-out seeds resolve a pair it said none likely would (by resolve_limit)
  calibration_bootstrap  (when named) the same, each seed trained on its own bootstrap of the training set
             (data.bootstrap_train): the seeds vary the data sampled too
  calibration_images  (when named) the same models, 8 seeds, scored once on 4,096 held-out images: the
             intervals a run with a 64-, 128- or 256-image test split prints, judged against the
             same networks on the images outside it (one seed), and R = 3 against the seeds left out there
  repeats    (when named) the suite's models with train.repeats: 3 in one run vs the same three seeds as three
             runs one after another, end to end through the CLI
  scale      the same 12 members (3 built-in models x 4 widths) as one group, as 4 groups of 3 and
             as 12 single runs one after another, end to end through the CLI: wall time and peak
             memory; and the plan's predicted memory of each group vs what it used
  stream     a folder of PNG files (20,000 at 256x256) trained held in memory vs streamed from the
             on-disk store (written, then reused): wall time, peak memory, images/s, input-wait
             share, scan pairs/s, store size; the input share of the quickstart's networks on
             the same files held in memory vs streamed (8 alternating rounds); the store's
             random reads vs a memory map
  fixed      (when named) whole commands phase by phase, each a fresh process: `harness run` of
             smoke, a 12- and a 40-member grid (the quickstart with --suite quickstart) against
             the seed-003 loop doing the same steps and validations (harness/bench/fixed.py)
  trace      (when named) the first call of the hand loop and of the fused step at one and ten
             steps per call, with and without the members' switches, each in a fresh process
  serving    (when named) the serving probe's batch-1 calls timed one model after another and
             interleaved across the models, alternating probe by probe: how much the ratio of two
             models' latencies moves between probes and how often their order flips
  gpu        with --gpu (or when named) on a machine with GPUs: float32 vs mixed_float16, XLA, mirrored vs per_model
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from harness.core.backend import import_tf
from harness.errors import HarnessError
from harness.rundir import read_csv
from harness.bench.sections import (
    bench_checkpoint, bench_compile, bench_dispatch, bench_fit, bench_gpu, bench_input, bench_loop,
    bench_memory, bench_overhead, bench_placement, bench_scaling,
)
from harness.bench.calibration import bench_calibration
from harness.bench.calibration_images import bench_calibration_images
from harness.bench.repeats import bench_repeats
from harness.bench.scale import bench_scale
from harness.bench.serving import bench_serving
from harness.bench.statistics import bench_statistics
from harness.bench.stream import bench_stream
from harness.bench.suites import DEFAULT_SECTIONS, SUITES
from harness.bench.fixed import bench_fixed
from harness.bench.trace import bench_trace

tf = import_tf()
# A check that the section works: two tiny models, 4 seeds, a few steps (no calibration figure).
TINY_CALIBRATION = {"seeds": 4, "steps": 8, "side": 16, "train_size": 32, "val_size": 16, "sizes": (1, 3), "subsets": 4, "resamples": 100,
                    "models": [{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet"}]}
TINY_CALIBRATION_IMAGES = {"seeds": 4, "steps": 8, "side": 16, "train_size": 32, "val_size": 16, "test_size": 64, "sizes": (16, 32),
                           "draws": 4, "cuts": 1, "resamples": 100, "models": TINY_CALIBRATION["models"]}


def _dated_folder(out_dir: Path) -> Path:
    from harness.rundir import make_folder

    return make_folder(out_dir / datetime.now(timezone.utc).strftime("%Y-%m-%d"), "bench --out")


def run_bench(suite: str, out_dir: Path, rounds: int | None = None, steps: int | None = None, gpu: bool = False, sections: list[str] | None = None) -> pd.DataFrame:
    from harness.config.schema import PlacementSpec
    from harness.core.placement import configure_devices

    # `sections` are known names: the command line, the only caller, checked them before TensorFlow loaded.
    configure_devices(PlacementSpec(logical_cpus=2))  # for the placement section; before any op
    # The bench builds many loops on purpose; TensorFlow would warn about "retracing" each time.
    tf.get_logger().setLevel("ERROR")
    folder = _dated_folder(out_dir)
    _write_machine(folder)
    work = _sections(suite, folder, rounds, steps)
    chosen = sections or [*DEFAULT_SECTIONS, *(["gpu"] if gpu else [])]
    tables = []
    for name in chosen:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        tables.append(work[name]())
        pd.concat(tables, ignore_index=True).to_csv(folder / "bench.csv", index=False)  # keep partial results
    table = pd.concat(tables, ignore_index=True)
    _save_plots(table, folder)
    table.attrs["folder"] = str(folder)
    return table


def _write_machine(folder: Path) -> None:
    """machine.json beside bench.csv: the milliseconds are this machine's, and the ratios need not hold on another."""
    import json

    from harness.core.placement import tensorflow_hardware
    from harness.rundir import atomic_write_text, this_machine, versions

    atomic_write_text(folder / "machine.json", json.dumps({**this_machine(**tensorflow_hardware()), "versions": versions()}, indent=1) + "\n")


def bench_text(table: pd.DataFrame) -> str:
    """What `harness bench` prints: one small table per section with the columns it filled (bench.csv
    holds every section in one table of about 40 columns, nearly all empty on any one row), then
    where the files are."""
    parts = []
    for section, rows in table.groupby("section", sort=False):
        rows = rows.drop(columns="section").dropna(axis=1, how="all")
        rows = rows.mask(rows.isna())  # None as NaN: pandas 2 prints a None as "None", not na_rep
        text = rows.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}")
        parts.append(f"== {section} ==\n{text}")
    if folder := table.attrs.get("folder"):
        parts.append(f"bench.csv and its plots: {folder} (machine.json: where they were measured)")
    return "\n\n".join(parts)


def _sections(suite: str, folder: Path, rounds: int | None, steps: int | None) -> dict:
    """Every section by name (suites.SECTIONS), each a thunk."""
    base = SUITES[suite]
    tiny = suite == "tiny"
    asked_rounds = rounds
    rounds = rounds or (2 if tiny else 15)  # run-to-run spread here is ~3%: many rounds
    steps = steps or (2 if tiny else 10)
    max_n = 2 if tiny else 6
    fit_steps = 4 if tiny else 100  # end to end includes tracing: a realistic run is not 10 steps
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
        "statistics": lambda: bench_statistics(1 if tiny else 3, *((6, 50, 200) if tiny else ())),
        "stream": lambda: bench_stream(folder, 60 if tiny else 20_000, 32 if tiny else 256, 4 if tiny else 200, quickstart=not tiny, rounds=1 if tiny else 8),
        "scale": lambda: bench_scale(base, (4,) if tiny else (8, 16, 24, 32), 4 if tiny else 100, 1 if tiny else 2, folder, 2 if tiny else None),
        "gpu": lambda: bench_gpu(base, rounds, steps),
        "calibration": lambda: bench_calibration(folder, **(TINY_CALIBRATION if tiny else {})),
        "calibration_bootstrap": lambda: bench_calibration(folder, **(TINY_CALIBRATION if tiny else {}), bootstrap_train=True),
        "calibration_images": lambda: bench_calibration_images(folder, **(TINY_CALIBRATION_IMAGES if tiny else {})),
        "repeats": lambda: bench_repeats(base, 4 if tiny else 100, asked_rounds or (1 if tiny else 2), folder),
        "fixed": lambda: bench_fixed(folder, suite, asked_rounds or 1),  # whole commands, fresh processes: minutes
        "trace": lambda: bench_trace(suite, asked_rounds or (1 if tiny else 3)),  # a fresh process per first call
        "serving": lambda: bench_serving(base, asked_rounds or (2 if tiny else 20), 10 if tiny else 50),
    }
    return work  # keyed by suites.SECTIONS, in its order (tested)


def run_bench_processes(suite: str, out_dir: Path, processes: int, rounds: int | None = None, steps: int | None = None, gpu: bool = False, sections: list[str] | None = None) -> pd.DataFrame:
    """The bench `processes` times, each in a fresh process, merged: every figure is the median
    across processes, and `ratio_min`/`ratio_max` show how far they spread.

    Why: within one process, two identical copies of the same contender can differ by up to ~6%
    for the whole process, however many rounds alternate them (likely where their memory and
    threads happen to fall); the `hand_loop_again` row shows it. A fresh process draws again. Every
    process's rows are kept in bench_processes.csv."""
    from harness.core.backend import user_environment

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
        tables.append(read_csv(child_csv).assign(process=i + 1))
        if i == 0:
            shutil.copy(child_csv.parent / "machine.json", folder / "machine.json")
        shutil.rmtree(child_out)
    every = pd.concat(tables, ignore_index=True)
    every.to_csv(folder / "bench_processes.csv", index=False)
    table = merge_processes(every)
    table.to_csv(folder / "bench.csv", index=False)
    _save_plots(table, folder)
    table.attrs["folder"] = str(folder)
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
    from harness.outputs.plots import plt, save_figure

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
    from harness.outputs.plots import plt, save_figure

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
