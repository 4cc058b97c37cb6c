"""Bench section `repeats`: what measuring training randomness costs. The suite's models trained
with `train.repeats: 3` in one run (3 members per model in one fused step, 3 input streams)
against the same three training seeds as three separate runs one after another, end to end
through the real CLI (start-up, tracing, training, outputs), alternating round by round.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from harness.bench.scale import _run
from harness.bench.timing import _section

REPEATS = 3


def bench_repeats(base: dict, steps: int, rounds: int, folder: Path) -> pd.DataFrame:
    config = {**base, "name": "repeats", "train": {"steps": steps, "steps_per_call": 10, "batchnorm_momentum": 0.9},
              "output": {"probe_steps": 0, "progress": "none", "tensorboard": False, "sample_images": 0, "export": False}}
    results = folder / "repeats-runs"
    single = {"grouping": "single"}
    measured: dict[str, list[float]] = {"one run, repeats 3": [], "3 runs, one seed each": []}
    for _ in range(rounds):
        together = _run({**config, "train": {**config["train"], "repeats": REPEATS}}, single, results, folder)
        measured["one run, repeats 3"].append(together["seconds"])
        apart = [_run({**config, "seed": base.get("seed", 0) + r}, single, results, folder)["seconds"] for r in range(REPEATS)]
        measured["3 runs, one seed each"].append(sum(apart))
    baseline = statistics.median(measured["3 runs, one seed each"])
    rows = [{"contender": name, "end_to_end_s": round(statistics.median(times), 2), "ratio": round(statistics.median(times) / baseline, 3),
             "baseline": "3 runs, one seed each", "models": len(base["models"]), "steps": steps, "rounds": len(times)}
            for name, times in measured.items()]
    return _section("repeats", rows)
