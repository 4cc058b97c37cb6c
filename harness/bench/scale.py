"""The bench's `scale` section: the same N members trained as one group, as groups of three, and
as N single runs one after another, end to end through the real CLI (process start-up, data,
tracing, training, outputs), arrangements alternating round by round; and how well the plan's
predicted group memory matched what each group really used.

Peak memory is the largest resident set of any process of the run (the driver or one of its
groups), read from the kernel's accounting of a wrapper process's waited-for descendants.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from harness.bench.timing import _section, rotated

# Runs a command and prints its wall time and the peak RSS of its process tree (RUSAGE_CHILDREN
# covers every descendant that was waited for: the driver and each group's process).
_WRAPPER = (
    "import json, resource, subprocess, sys, time\n"
    "began = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
    "print(json.dumps({'code': code.returncode, 'seconds': time.perf_counter() - began,\n"
    "  'peak_rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 'stderr': code.stderr[-2000:]}))\n"
)
ARCHS = ("tiny_fcn", "tiny_unet", "tiny_deconv")


def scale_members(widths: tuple[int, ...]) -> list[dict]:
    return [{"name": f"{arch.removeprefix('tiny_')}-w{width}", "arch": arch, "options": {"width": width}} for width in widths for arch in ARCHS]


def arrangements(count: int) -> dict[str, dict]:
    """Placement settings of each arrangement. A budget no group reaches makes the plan measure
    each member (cached), so every group records its predicted memory."""
    measured = {"memory_budget_mb": 10**6}
    chosen = {"one group": {"grouping": "single"}}
    if count > 3:
        chosen[f"groups of 3 ({count // 3})"] = {**measured, "max_members_per_group": 3}
    chosen[f"{count} single runs"] = {**measured, "max_members_per_group": 1}
    return chosen


def bench_scale(base: dict, widths: tuple[int, ...], steps: int, rounds: int, folder: Path, limit: int | None = None) -> pd.DataFrame:
    members = scale_members(widths)[:limit]
    config = {**base, "name": "scale", "models": members,
              "train": {"steps": steps, "steps_per_call": 10, "batchnorm_momentum": 0.9},
              "output": {"probe_steps": 0, "progress": "none", "tensorboard": False, "sample_images": 0}}
    results = folder / "scale-runs"
    measured: dict[str, list[dict]] = {}
    names = list(arrangements(len(members)))
    _warm_plan_cache(config, arrangements(len(members))[names[-1]], results, folder)  # probes are paid once, not timed
    for round_index in range(rounds):
        for name in rotated(names, round_index):
            measured.setdefault(name, []).append(_run(config, arrangements(len(members))[name], results, folder))
    rows = _arrangement_rows(measured, names[0])
    rows += _plan_accuracy_rows(results / "scale")
    return _section("scale", rows)


def _warm_plan_cache(config: dict, placement: dict, results: Path, folder: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "harness", "plan", str(_write(config, placement, folder)), "--results", str(results)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scale bench: harness plan failed: {done.stderr[-2000:]}")


def _write(config: dict, placement: dict, folder: Path) -> Path:
    path = folder / "scale.yaml"
    path.write_text(yaml.safe_dump({**config, "placement": placement}, sort_keys=False), encoding="utf-8")
    return path


def _run(config: dict, placement: dict, results: Path, folder: Path) -> dict:
    path = _write(config, placement, folder)
    command = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "harness", "run", str(path), "--results", str(results)]
    done = subprocess.run(command, capture_output=True, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["code"] != 0:
        raise RuntimeError(f"scale bench run failed (exit {figures['code']}): {figures['stderr']}")
    return figures


def _arrangement_rows(measured: dict[str, list[dict]], baseline: str) -> list[dict]:
    base_s = statistics.median(m["seconds"] for m in measured[baseline])
    rows = []
    for name, runs in measured.items():
        seconds = statistics.median(m["seconds"] for m in runs)
        rows.append({"contender": name, "end_to_end_s": round(seconds, 2), "ratio": round(seconds / base_s, 3), "baseline": baseline,
                     "peak_rss_mb": round(max(m["peak_rss_mb"] for m in runs), 1), "rounds": len(runs)})
    return rows


def _plan_accuracy_rows(experiment: Path) -> list[dict]:
    """Each group of the newest grouped runs: predicted memory (sum of its members' probes) and
    the group's measured peak above its process's start."""
    rows = []
    for run in sorted(experiment.glob("*/run.json")):
        info = json.loads(run.read_text(encoding="utf-8"))
        for group in info.get("groups", []):
            if group.get("planned_mb") and group.get("peak_rss_mb"):
                rows.append({"contender": f"plan accuracy: {len(group['members'])} member(s) ({run.parent.name}/{group['name']})",
                             "predicted_mb": group["planned_mb"], "measured_mb": group["peak_rss_mb"],
                             "ratio": round(group["peak_rss_mb"] / group["planned_mb"], 3), "baseline": "measured / predicted"})
    return rows
