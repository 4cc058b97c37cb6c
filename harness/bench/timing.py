"""Timing contenders side by side: rounds in rotating order, per-round ratios to a baseline, the
median and its bootstrap interval."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

import pandas as pd

from harness.core.backend import import_tf, user_environment
from harness.config.schema import ExperimentConfig
from harness.config.loading import validate_config
from harness.bench.contenders import Contender

tf = import_tf()




def child_figures(command: list[str], what: str, timeout: float | None = None) -> dict:
    """Run a measuring child process (a fresh process: nothing traced or loaded before it) with
    the user's environment; its last stdout line is a JSON object of figures. A child that fails
    raises, naming `what` and ending with its stderr."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=user_environment())
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def paired_ratios(values, baselines) -> list[float]:
    """Each round's value over the baseline's of the same round (the two ran side by side), in
    rising order: their median is the ratio a bench quotes, their ends its range."""
    return sorted(value / base for value, base in zip(values, baselines))


def rotated(items: list, round_index: int) -> list:
    """The order of round `round_index`: A B C, then B C A, then C A B, ... (every item in every
    position equally often over len(items) rounds)."""
    shift = round_index % len(items)
    return items[shift:] + items[:shift]


def alternate(contenders: list[Contender], rounds: int, steps: int) -> pd.DataFrame:
    """Rows (round, contender, ms_per_step), contenders interleaved within every round. The order
    rotates from round to round (A B C, B C A, C A B, ...): every contender runs in every position
    equally often, so a cost that depends on what ran just before (caches, thread pools warmed by
    another contender's models) does not favour one of them."""
    rows = []
    for r in range(rounds):
        for c in rotated(contenders, r):
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


