"""Section `serving` (when named): the order of the serving probe's batch-1 calls, side by side.

A run times each network's latency at batch 1 in rounds interleaved across the networks
(training/serve.py `_interleaved_calls`); before 2026-12-07 it timed each network's calls back to
back, one network after another. Both orders are run here, alternating probe by probe, on the
suite's models in one process, and for each pair of models the ratio of their median latencies is
compared across probes: how much it moves (coefficient of variation, lowest and highest) and how
often the pair's order differs from its usual one. What moves the ratio is the machine's speed
changing during a probe; an order that charges it to every model alike moves it less.
"""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pandas as pd

from harness.bench.contenders import _members
from harness.bench.timing import _section, _with, rotated
from harness.training.serve import _interleaved_calls, _timed_calls, serving_functions


def bench_serving(base, probes: int, calls: int = 50) -> pd.DataFrame:
    """A row per order and pair of models: the median ratio of their latencies over `probes`
    probes of `calls` calls each, its spread, and the share of probes that put the pair the other
    way round."""
    config = _with(base)
    _, members, _ = _members(config)
    infers, images, devices = serving_functions({m.name: (m.model, m.device) for m in members}, config.data.input_shape)
    orders = {
        "one after another": lambda: {key: _timed_calls(infers[key], images[key], most=calls, least=calls, seconds=math.inf)[0] for key in infers},
        "interleaved": lambda: _interleaved_calls(infers, devices, images, calls),
    }
    medians: dict[str, list[dict[str, float]]] = {order: [] for order in orders}
    for probe in range(probes):
        for order in rotated(list(orders), probe):
            medians[order].append({key: statistics.median(times) for key, times in orders[order]().items()})
    rows = []
    for order, probed in medians.items():
        for a, b in itertools.combinations(infers, 2):
            ratios = np.array([p[a] / p[b] for p in probed])
            usual = np.median(ratios) >= 1
            rows.append({"contender": f"{order}: {a} / {b}", "probes": probes, "calls": calls, "median_ratio": round(float(np.median(ratios)), 3),
                         "ratio_low": round(float(ratios.min()), 3), "ratio_high": round(float(ratios.max()), 3),
                         "ratio_cv": round(float(ratios.std() / ratios.mean()), 3), "order_flips": round(float(np.mean((ratios >= 1) != usual)), 3)})
    return _section("serving", rows)
