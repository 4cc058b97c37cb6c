"""Merging the groups of a run into its one run directory: rows, per-image scores, member records,
exported models and TensorBoard folders. Members never share a name across groups, so merging is
concatenation; it is written with the same atomic writes as everything else, and moving a
folder twice is harmless (a merge interrupted half-way is simply done again)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from harness.outputs.tables import load_losses
from harness.rundir import RunDir, atomic_write_text, read_csv


def group_dir(run: RunDir, name: str) -> RunDir:
    return run.group(name)


def merge_groups(run: RunDir, groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the run's losses.csv, val_scores.csv and test_scores.csv from its completed groups, move their models
    and TensorBoard folders up, and return what run.json takes from them: `models` for every member
    (those that did not fit even alone as `oom`) and, with a test split, `test`: which weights of
    each member it scored (samples.png and `harness report` picture those)."""
    completed = [group_dir(run, g["name"]) for g in groups if g["status"] == "completed"]
    _concat([g.losses_csv for g in completed], run.losses_csv, load_losses)
    _concat([g.val_scores_csv for g in completed], run.val_scores_csv, read_csv)
    _concat([g.test_scores_csv for g in completed], run.test_scores_csv, read_csv)
    models: dict[str, Any] = {}
    test: dict[str, Any] = {}
    for group in completed:
        info = json.loads(group.run_json.read_text(encoding="utf-8"))
        models.update(info.get("models", {}))
        if info.get("test"):  # the same split and choice in every group; their members side by side
            test = {**info["test"], "members": {**test.get("members", {}), **info["test"]["members"]}}
        for folder in ("models", "tb"):
            _move_children(group.path / folder, run.path / folder)
    for group in groups:
        if group["status"] == "oom":
            models.update({name: {"status": "oom", "changed_at_step": 0} for name in group["members"]})
    return {"models": models, **({"test": test} if test else {})}


def _concat(sources: list[Path], target: Path, read) -> None:
    tables = [read(p) for p in sources if p.exists()]
    tables = [t for t in tables if len(t)]
    if not tables:
        return
    merged = pd.concat(tables, ignore_index=True)
    if "step" in merged:
        merged = merged.sort_values("step", kind="mergesort")  # stable: groups in order within a step
    atomic_write_text(target, merged.to_csv(index=False))


def _move_children(source: Path, target: Path) -> None:
    if not source.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for child in source.iterdir():
        destination = target / child.name
        if not destination.exists():
            os.replace(child, destination)
