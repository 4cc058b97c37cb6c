"""`harness bench`: measured, side by side, in one process.

Contenders are timed alternately (A B C A B C ...), each round running the same number of steps on
batches from the same pipeline, and the figure quoted is the median over rounds of the ratio to
the baseline, so a slow moment of the machine hits every contender alike. Tracing is timed apart.

Sections so far:
  placement   each strategy on the devices at hand vs one device (on two logical CPUs: an
              overhead check, not a speed-up: they share the same cores);
  checkpoint  one save of every model and optimizer, and its share of step time at one save per
              epoch.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .backend import import_tf
from .config import ExperimentConfig, validate_config

tf = import_tf()


@dataclass
class Contender:
    name: str
    call: Callable[[int], None]  # run n steps, wait for them to finish
    trace_s: float


def make_fused_contender(config: ExperimentConfig, name: str) -> Contender:
    """The harness's own fused loop under `config.placement`, on an endless pipeline."""
    from .data import build_datasets
    from .members import build_members
    from .runtime import build_placement
    from .step import make_train_loop

    placement = build_placement(config)
    strategy = placement.strategy
    with strategy.scope():
        members = build_members(config, placement.model_devices)
        step = tf.Variable(0, dtype=tf.int64)
    data = build_datasets(config.data, config.seed, 0, 10**9)
    iterator = iter(strategy.experimental_distribute_dataset(data.train))
    loop = make_train_loop(members, strategy, step, config.data.batch_size)

    def call(n: int) -> None:
        tf.nest.map_structure(lambda t: t.numpy(), loop(iterator, tf.constant(n, tf.int32)))

    began = time.perf_counter()
    call(1)
    return Contender(name, call, time.perf_counter() - began)


def alternate(contenders: list[Contender], rounds: int, steps: int) -> pd.DataFrame:
    """Rows (round, contender, ms_per_step), contenders interleaved within every round."""
    rows = []
    for r in range(rounds):
        for c in contenders:
            began = time.perf_counter()
            c.call(steps)
            rows.append({"round": r, "contender": c.name, "ms_per_step": 1000 * (time.perf_counter() - began) / steps})
    return pd.DataFrame(rows)


def ratios_to(timings: pd.DataFrame, baseline: str) -> pd.DataFrame:
    wide = timings.pivot(index="round", columns="contender", values="ms_per_step")
    out = []
    for name in timings["contender"].unique():  # contenders in the order they were given
        ratio = wide[name] / wide[baseline]
        out.append(
            {
                "contender": name,
                "median_ms_per_step": round(float(wide[name].median()), 3),
                "median_ratio_to_" + baseline: round(float(statistics.median(ratio)), 4),
            }
        )
    return pd.DataFrame(out)


def bench_placement(base: dict[str, Any], rounds: int, steps: int) -> pd.DataFrame:
    strategies = ["one_device", "mirrored", "per_model"]
    contenders = []
    for strategy in strategies:
        raw = {**base, "placement": {**base.get("placement", {}), "strategy": strategy}}
        contenders.append(make_fused_contender(validate_config(raw), strategy))
    timings = alternate(contenders, rounds, steps)
    table = ratios_to(timings, "one_device")
    table.insert(0, "section", "placement")
    table["trace_s"] = [round(c.trace_s, 2) for c in contenders]
    return table


def bench_checkpoint(base: dict[str, Any], saves: int, folder: Path) -> pd.DataFrame:
    """Time of one checkpoint save of all models and optimizers, against the fused step."""
    from . import checkpoints as ckpt

    raw = {**base, "placement": {**base.get("placement", {}), "strategy": "one_device"}}
    config = validate_config(raw)
    contender = make_fused_contender(config, "one_device")
    step_ms = statistics.median(alternate([contender], 3, 2)["ms_per_step"])
    from .members import build_members

    members = build_members(config)
    checkpoint = ckpt.make_checkpoint(members, tf.Variable(0, dtype=tf.int64))
    times = []
    for i in range(saves):
        began = time.perf_counter()
        ckpt.save(checkpoint, folder / "ckpt", i + 1, keep=1)
        times.append(1000 * (time.perf_counter() - began))
    save_ms = statistics.median(times)
    steps_per_epoch = config.data.train_size // config.data.batch_size
    return pd.DataFrame(
        [
            {
                "section": "checkpoint",
                "contender": "save all models",
                "median_ms_per_step": round(step_ms, 3),
                "save_ms": round(save_ms, 1),
                "overhead_at_one_save_per_epoch": round(save_ms / (steps_per_epoch * step_ms), 4),
            }
        ]
    )


TINY_EXPERIMENT = {
    "name": "bench",
    "seed": 0,
    "data": {"image_size": [32, 32], "train_size": 64, "val_size": 8, "batch_size": 8},
    "models": [{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet"}],
    "placement": {"logical_cpus": 2},
}

QUICKSTART_MODELS = {
    "name": "bench",
    "seed": 0,
    "data": {"image_size": [96, 96], "train_size": 400, "val_size": 8, "batch_size": 8},
    "models": [
        {"name": "unet", "arch": "Unet"},
        {"name": "linknet", "arch": "Linknet"},
        {"name": "fpn", "arch": "FPN"},
        {"name": "pspnet", "arch": "PSPNet"},
    ],
    "placement": {"logical_cpus": 2},
}


def run_bench(tiny: bool, out_dir: Path, rounds: int | None = None, steps: int | None = None) -> pd.DataFrame:
    from .runtime import configure_devices
    from .config import PlacementSpec

    configure_devices(PlacementSpec(logical_cpus=2))
    base = TINY_EXPERIMENT if tiny else QUICKSTART_MODELS
    rounds = rounds or (2 if tiny else 5)
    steps = steps or (2 if tiny else 5)
    folder = out_dir / datetime.now(timezone.utc).strftime("%Y-%m-%d")
    folder.mkdir(parents=True, exist_ok=True)
    table = pd.concat([bench_placement(base, rounds, steps), bench_checkpoint(base, 3, folder)], ignore_index=True)
    table.to_csv(folder / "bench.csv", index=False)
    return table
