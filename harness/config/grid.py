"""Grids: a model entry with `grid:` becomes one member per combination of its values.

    {name: unet, arch: Unet, grid: {backbone: [resnet18, resnet34], optimizer.learning_rate: [1e-3, 3e-4]}}

gives unet-resnet18-lr1e-3, unet-resnet18-lr3e-4, unet-resnet34-lr1e-3, unet-resnet34-lr3e-4, in
that order (the first key varies slowest). Each member keeps what it was given in `grid_values`
(one summary.csv column per grid key). Expansion works on the raw YAML, before validation, so a
bad value is reported against the grid key and value that made it (`GridOrigin`).
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from typing import Any

GRID = "grid"
GRID_VALUES = "grid_values"
# Short labels for the keys grids vary most; any other key is labelled by its last part.
ABBREVIATIONS = {"learning_rate": "lr", "weight_decay": "wd", "momentum": "mom", "l1_lambda": "l1", "downsample_factor": "df"}
# Nested sections a grid key may reach into, and where a missing one starts from.
_TRAIN_DEFAULTS = {"optimizer": "optimizer"}  # models.<x>.optimizer falls back to train.optimizer
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# PyYAML reads YAML 1.1, where `1e-3` (no dot) is a string; in YAML 1.2 it is a number, as users mean.
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class GridOrigin:
    """Where an expanded member came from: the entry and the values it was given."""

    entry: str  # "models.0(unet)"
    values: dict[str, Any]

    def describe(self, member: str) -> str:
        shown = ", ".join(f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}" for key, value in self.values.items())
        return f"{self.entry}.grid ({shown} -> member {member})"


def expand_grids(raw: dict) -> tuple[dict, dict[int, GridOrigin], list[str]]:
    """The raw config with every grid expanded, each expanded member's origin by its position in
    the new `models` list, and the problems with the grids themselves (not with their values:
    those are the schema's to find, reported against the origin)."""
    models = raw.get("models")
    if not isinstance(models, list) or not any(isinstance(m, dict) and GRID in m for m in models):
        return raw, {}, []
    train_defaults = raw.get("train") if isinstance(raw.get("train"), dict) else {}
    expanded: list[Any] = []
    origins: dict[int, GridOrigin] = {}
    problems: list[str] = []
    for index, entry in enumerate(models):
        if not (isinstance(entry, dict) and GRID in entry):
            expanded.append(entry)
            continue
        where = f"models.{index}({entry.get('name')})" if isinstance(entry.get("name"), str) else f"models.{index}"
        members, trouble = _expand_entry(entry, where, train_defaults)
        problems += trouble
        for member, values in members:
            origins[len(expanded)] = GridOrigin(where, values)
            expanded.append(member)
    names = [m.get("name") for m in expanded if isinstance(m, dict)]
    repeated = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    problems += [f"models: the grid makes the name {n!r} more than once (values that print alike, e.g. 1e-3 and 0.001?)" for n in repeated]
    return {**raw, "models": expanded}, origins, problems


def _expand_entry(entry: dict, where: str, train_defaults: dict) -> tuple[list[tuple[dict, dict]], list[str]]:
    grid = entry[GRID]
    if not isinstance(grid, dict) or not grid:
        return [], [f"{where}.grid: a mapping of keys to lists of values, e.g. {{backbone: [resnet18, resnet34]}}"]
    problems = []
    for key, values in grid.items():
        if not isinstance(key, str) or not key or key.split(".")[0] in ("name", GRID, GRID_VALUES):
            problems.append(f"{where}.grid: {key!r} cannot vary (the name is made from the grid's values)")
        elif not isinstance(values, list) or not values:
            problems.append(f"{where}.grid.{key}: a non-empty list of values, got {values!r}")
    if problems:
        return [], problems
    base = {k: v for k, v in entry.items() if k != GRID}
    members = []
    grid = {key: [as_number(v) for v in values] for key, values in grid.items()}
    for combination in itertools.product(*grid.values()):
        values = dict(zip(grid, combination))
        member = copy.deepcopy(base)
        for key, value in values.items():
            trouble = _assign(member, key, value, train_defaults)
            if trouble:
                return [], [f"{where}.grid.{key}: {trouble}"]
        labels = [member_label(key, value, grid[key]) for key, value in values.items()]
        member["name"] = "-".join([str(base.get("name", "model")), *labels])
        member[GRID_VALUES] = values
        members.append((member, values))
    return members, []


def _assign(member: dict, key: str, value: Any, train_defaults: dict) -> str | None:
    """Set a dotted key in a model entry; a missing optimizer starts from train.optimizer, so a
    grid over optimizer.learning_rate keeps the train-level optimizer's other settings."""
    parts = key.split(".")
    node = member
    for depth, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            default = train_defaults.get(_TRAIN_DEFAULTS[part]) if depth == 0 and part in _TRAIN_DEFAULTS else None
            node[part] = copy.deepcopy(default) if isinstance(default, dict) else {}
        if not isinstance(node[part], dict):
            return f"{'.'.join(parts[: depth + 1])} is {node[part]!r}, not a mapping to set {parts[-1]!r} in"
        node = node[part]
    node[parts[-1]] = copy.deepcopy(value)
    return None


def member_label(key: str, value: Any, all_values: list) -> str:
    """A readable, stable part of a member's name: strings as themselves (resnet34), numbers
    after a short key (lr3e-4, width32), booleans as key / no-key, anything else by position."""
    short = ABBREVIATIONS.get(key.split(".")[-1], key.split(".")[-1])
    if isinstance(value, bool):
        return short if value else f"no-{short}"
    if isinstance(value, str):
        return _UNSAFE.sub("_", value).strip("_") or f"{short}{all_values.index(value) + 1}"
    if isinstance(value, int):
        return f"{short}{value}"
    if isinstance(value, float):
        return f"{short}{format_number(value)}"
    return f"{short}{all_values.index(value) + 1}"


def as_number(value: Any) -> Any:
    """`1e-3` read as text by YAML 1.1 becomes the number YAML 1.2 (and the user) means."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value)
        return int(number) if number.is_integer() and not re.search(r"[.eE]", value) else number
    return value


def format_number(value: float) -> str:
    """3e-4, 1e-3, 0.01, 0.5, 2.5e5: short and free of characters a name may not hold."""
    if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"
