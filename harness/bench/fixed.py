"""Section `fixed`: where the wall time of a whole command goes, as a user meets it, against the
seed-003 loop doing the same steps and the same validation passes (`harness.bench.hand_loop`),
each a fresh process, alternating. The run's phases come from its run.json (`phases`: build, first
call, steady steps, validations, checkpoints, each end-of-run action); what surrounds the Runner is
timed from outside: imports and config (process start to the Runner), printing the results, and
the tail (the last line to the process's exit).

Configs: `smoke` (experiments/smoke.yaml) and `grid12` (three tiny architectures x four learning
rates), both against the hand loop; `grid40` (harness only: the end-of-run actions of 40 members);
with `--suite quickstart`, the quickstart (minutes per process).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from harness.bench.timing import _section, paired_ratios
from harness.core.backend import user_environment
from harness.errors import ConfigError

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# The Runner's phases up to the end of training, in run.json `phases`; `eval_actions`: early stops
# and race rungs (their records, members leaving the step), `best_weights`: best.keras written.
HARNESS_PHASES = ("build", "first_call", "first_validation", "steady_steps", "validation", "checkpoints", "best_weights", "eval_actions")
REST_OF_LOOP = "the rest of training (rows, run.json, progress)"


def grid_config(archs_lrs: tuple[int, int]) -> dict:
    archs = ["tiny_fcn", "tiny_unet", "tiny_deconv", "tiny_fcn"][: archs_lrs[0]]
    rates = [1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7][: archs_lrs[1]]
    models = [{"name": f"{arch.removeprefix('tiny_')}{i}", "arch": arch, "grid": {"optimizer.learning_rate": rates}} for i, arch in enumerate(archs)]
    return {"name": "grid", "seed": 0, "data": {"image_size": [32, 32], "train_size": 64, "val_size": 32, "batch_size": 8},
            "models": models, "train": {"epochs": 2, "steps_per_call": 8}}


def bench_fixed(folder: Path, suite: str, rounds: int) -> pd.DataFrame:
    configs = _configs(folder, suite)
    rows = []
    for name, (path, overrides, with_hand) in configs.items():
        print(f"bench: fixed: {name} ...", file=sys.stderr, flush=True)
        runs: dict[str, list[dict]] = {"harness": [], "hand_loop": []}
        for _ in range(rounds):
            runs["harness"].append(time_harness(path, overrides, folder))
            if with_hand:
                runs["hand_loop"].append(time_hand_loop(path, overrides))
        rows += _rows(name, runs)
    return _section("fixed", rows)


def _configs(folder: Path, suite: str) -> dict[str, tuple[Path, list[str], bool]]:
    if not (EXPERIMENTS / "smoke.yaml").is_file():
        raise ConfigError(f"bench --section fixed times the project's experiments/ files; {EXPERIMENTS} has none (run it from a checkout)")
    if suite == "quickstart":
        return {"quickstart": (EXPERIMENTS / "quickstart.yaml", [], True)}
    if suite == "tiny":
        return {"smoke": (EXPERIMENTS / "smoke.yaml", ["train.epochs=1"], True)}
    written = {}
    for name, shape in (("grid12", (3, 4)), ("grid40", (4, 10))):
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**grid_config(shape), "name": name}, sort_keys=False), encoding="utf-8")
        written[name] = path
    return {"smoke": (EXPERIMENTS / "smoke.yaml", [], True), "grid12": (written["grid12"], [], True), "grid40": (written["grid40"], [], False)}


def _timed_process(command: list[str], marker: str | None = None) -> tuple[float, float, float, list[str]]:
    """(start, time of the last stdout line, or of the line starting with `marker`, exit, lines)."""
    began = time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=user_environment())
    lines, last = [], began
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if marker is None or line.startswith(marker):
            last = time.time()
    process.wait()
    ended = time.time()
    if process.returncode != 0:
        raise RuntimeError(f"bench fixed: {' '.join(command)} exited {process.returncode}")
    return began, last, ended, lines


def time_harness(config: Path, overrides: list[str], folder: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=folder) as results:
        command = [sys.executable, "-m", "harness", "run", str(config), "--results", results, "--set", "output.progress=lines"]
        command += [word for o in overrides for word in ("--set", o)]
        began, results_line, ended, _ = _timed_process(command, marker="results:")
        (run_json,) = Path(results).glob("*/*/run.json")
        phases = json.loads(run_json.read_text(encoding="utf-8"))["phases"]
    seconds, marks = phases["seconds"], phases["marks"]
    timed = {"imports and config": marks["runner_started"] - began, **{p: seconds.get(p, 0.0) for p in HARNESS_PHASES}}
    # What the phases leave out of training's wall time, so the rows add up to the whole command.
    timed[REST_OF_LOOP] = marks["training_done"] - marks["runner_started"] - sum(seconds.get(p, 0.0) for p in HARNESS_PHASES)
    timed.update({k: v for k, v in seconds.items() if k.startswith("end: ")})
    timed["printing the results"] = results_line - marks["end_of_run_done"]
    timed["tail (last line to exit)"] = ended - results_line
    timed["end to end"] = ended - began
    timed["end-of-run actions"] = sum(v for k, v in seconds.items() if k.startswith("end: "))
    return timed


def time_hand_loop(config: Path, overrides: list[str]) -> dict[str, float]:
    command = [sys.executable, "-m", "harness.bench.hand_loop", str(config)] + [word for o in overrides for word in ("--set", o)]
    began, last, ended, lines = _timed_process(command)
    facts = json.loads(lines[-1])
    marks, validations = facts["marks"], facts["validations_s"]
    return {
        "imports and config": marks["tensorflow_imported"] - began,
        "build": marks["built"] - marks["tensorflow_imported"],
        "first_call": marks["first_call_done"] - marks["built"],
        "first_validation": validations[0] if validations else 0.0,
        "steady_steps": marks["done"] - marks["first_call_done"] - sum(validations),
        "validation": sum(validations[1:]),
        "tail (last line to exit)": ended - last,
        "end to end": ended - began,
    }


def _rows(config: str, runs: dict[str, list[dict]]) -> list[dict]:
    phases = list(dict.fromkeys(p for contender in runs.values() for run in contender for p in run))
    rows = []
    for phase in phases:
        row = {"config": config, "phase": phase}
        for contender, measured in runs.items():
            values = [run[phase] for run in measured if phase in run]
            row[f"{contender}_s"] = round(statistics.median(values), 3) if values else None
        if phase == "end to end" and runs["hand_loop"]:
            row.update(round_ratios(runs["harness"], runs["hand_loop"]))
        rows.append(row)
    return rows


def round_ratios(harness: list[dict], hand: list[dict]) -> dict:
    """The whole command's ratio, round by round (the two commands of a round ran one after the
    other, in the same hour): the median (`ratio`) and, over several rounds, the range
    (`ratio_range`). A round where one command met a hiccup shows in the range, and moves the
    median less than it moves a ratio of medians taken from different rounds."""
    ratios = paired_ratios((h["end to end"] for h in harness), (b["end to end"] for b in hand))
    row: dict = {"ratio": round(statistics.median(ratios), 3)}
    if len(ratios) > 1:
        row["ratio_range"] = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
    return row
