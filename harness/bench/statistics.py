"""Bench section `statistics`: the time the ranking's statistics take for a large benchmark, on
synthetic per-image counts (the statistics see only numbers: no model is trained)."""

from __future__ import annotations

import statistics as stats_lib
import time

import numpy as np
import pandas as pd

from harness.config.naming import member_name, model_of, repeat_of
from harness.core.scores import segmentation_scores
from harness.outputs.statistics import Scored, across_seeds, bootstrap_metric, image_draws


def synthetic_members(members: int, images: int, seed: int = 0) -> dict[str, Scored]:
    """Members whose per-image IoU differs a little, as a real benchmark's would."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(50, 400, (images, 1)).astype(float)
    out = {}
    for m in range(members):
        quality = 0.6 + 0.3 * m / max(members - 1, 1)
        intersection = np.floor(truth * np.clip(rng.normal(quality, 0.1, (images, 1)), 0, 1))
        predicted = intersection + rng.integers(0, 60, (images, 1))
        out[f"m{m:02d}"] = Scored({"loss": rng.random(images), "intersection": intersection, "predicted": predicted, "truth": truth}, segmentation_scores)
    return out


def bench_statistics(rounds: int, members: int = 40, images: int = 500, resamples: int = 2000, seeds: int = 5) -> pd.DataFrame:
    scored = synthetic_members(members, images)
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        per_member, per_pair = bootstrap_metric(scored, "iou", resamples=resamples)
        times.append(time.perf_counter() - began)
    seeded = {member_name(f"m{m:02d}", s, seeds): scored for s in range(1, seeds + 1) for m, scored in enumerate(synthetic_members(members, images, seed=s).values())}
    per_seed = pd.DataFrame([{"model": model_of(name), "repeat": repeat_of(name), "member": name,
                              "value": scored.scores({k: v.sum(0) for k, v in scored.quantities.items()}, images)["iou"]} for name, scored in seeded.items()])
    began = time.perf_counter()
    _, tests = across_seeds(per_seed, "val_iou", image_draws(seeded, "iou", resamples=resamples))
    tests_s = time.perf_counter() - began
    return pd.DataFrame([
        {"section": "statistics", "contender": f"paired bootstrap: {members} members x {images} images x {resamples} resamples",
         "seconds": round(stats_lib.median(times), 3), "pairs": len(per_pair), "supported_pairs": int(per_pair["supported"].sum())},
        {"section": "statistics", "contender": f"seeds and images, Holm: {members} models x {seeds} seeds x {images} images x {resamples} resamples",
         "seconds": round(tests_s, 3), "pairs": len(tests), "supported_pairs": int(tests["supported"].sum())},
    ])
