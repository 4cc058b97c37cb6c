"""What changed between a run's recorded config (run.json `config`, config.yaml) and another.

A setting harness added after a run was made is absent from that run's record. It is added at a
default meant to keep what harness did before it, so at that default it is no change of the
experiment; set to anything else it is one (a race, a test split the older run could not have
had). `resume`, `harness nightly` (is tonight's run this experiment's?), `compare` and the nightly
notes decide with this one rule; the defaults are the schema's, looked up by a setting's path.
"""

from __future__ import annotations

import functools
import json
import typing
from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

NO_DEFAULT = object()  # a path the schema has no default for: unknown, required, or inside a list

# Settings whose default does not say what a run recorded before they existed did: synthetic data
# was drawn from the run's `seed` before `data.seed`, and no test split was held out before
# `data.test_size`. Each reads the older record (its top-level keys).
BEFORE_THEY_EXISTED = {
    "data.seed": lambda record: record.get("seed", 0),
    "data.test_size": lambda record: 0,
}


def fill_absent(raw: dict) -> None:
    """Set in an older run's config what its harness did for the settings it had no key for where
    the default would say otherwise (BEFORE_THEY_EXISTED), before it is validated."""
    for path, then in BEFORE_THEY_EXISTED.items():
        section, _, key = path.partition(".")
        if isinstance(raw.get(section), dict):
            raw[section].setdefault(key, then(raw))


def meant_when_absent(root: type[BaseModel], parts: Sequence[str], record: Any) -> Any:
    """What a run whose record has no key at `parts` did for that setting: its value before it
    existed where BEFORE_THEY_EXISTED says, else the schema's default (`default_at`)."""
    then = BEFORE_THEY_EXISTED.get(".".join(parts))
    return then(record) if then is not None else default_at(root, parts)


def default_at(root: type[BaseModel], parts: Sequence[str]) -> Any:
    """The default of the setting at `parts` under `root`, as config.yaml writes it (JSON types);
    a model entry's setting is ("models", "optimizer", "name"), without the entry's name."""
    cls: Any = root
    for depth, name in enumerate(parts):
        field = getattr(cls, "model_fields", {}).get(name)
        if field is None:
            return NO_DEFAULT
        if depth == len(parts) - 1:
            section = _default_section(cls)
            if section is not None:  # resolved as a run resolves it (`test_size: null` becomes 0)
                value = getattr(section, name)
            elif field.is_required():
                return NO_DEFAULT
            else:
                value = field.get_default(call_default_factory=True)
            return json.loads(json.dumps(value.model_dump(mode="json") if isinstance(value, BaseModel) else value, default=str))
        cls = _section_class(field.annotation)
        if cls is None:
            return NO_DEFAULT
    return NO_DEFAULT


@functools.cache
def _default_section(cls: type[BaseModel]) -> BaseModel | None:
    """The section with every setting at its default, validated (None where a setting is required:
    a model entry's name and arch)."""
    try:
        return cls()
    except ValidationError:
        return None


def _section_class(annotation: Any) -> type[BaseModel] | None:
    """The settings class a field holds (through Optional, Annotated, a union and a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation) if typing.get_origin(annotation) not in (None, typing.Literal) else ():
        if (found := _section_class(arg)) is not None:
            return found
    return None


def added_off_default(root: type[BaseModel], now: Any, older: Any, record: Any = None, parts: tuple[str, ...] = (),
                      shown: str = "") -> list[str]:
    """`key.path: (not a setting then) -> value` for each setting of `now` that `older` (the
    record, at the top) has no key for and that is not what that run did (`meant_when_absent`): a
    change the older harness could not have made."""
    record = older if record is None else record
    if isinstance(now, dict) and isinstance(older, dict):
        out = []
        for key, value in now.items():
            where = f"{shown}{key}"
            if key not in older:
                if value != meant_when_absent(root, (*parts, key), record):
                    out.append(f"{where}: (not a setting then) -> {value!r}")
            else:
                out += added_off_default(root, value, older[key], record, (*parts, key), f"{where}.")
        return out
    if isinstance(now, list) and isinstance(older, list) and len(now) == len(older):
        return [line for i, (n, o) in enumerate(zip(now, older)) for line in added_off_default(root, n, o, record, parts, f"{shown}{i}.")]
    return []


def keys_like(payload: Any, older: Any) -> Any:
    """`payload` with only the keys `older` has, at every level (lists matched item by item). A
    section that `older` has as a leaf (`train.race: null`) is kept whole: that is a change."""
    if isinstance(payload, dict) and isinstance(older, dict):
        return {k: keys_like(v, older[k]) for k, v in payload.items() if k in older}
    if isinstance(payload, list) and isinstance(older, list) and len(payload) == len(older):
        return [keys_like(p, o) for p, o in zip(payload, older)]
    return payload


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """`key.path: old -> new` for every leaf that differs (output settings are not compared)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            if key == "output":
                continue
            out += differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{prefix}{i}.")]
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def changed_since(root: type[BaseModel], older: dict, now: dict) -> list[str]:
    """What differs between a run's recorded config and `now`: the settings the record has that
    differ, and those added to harness since that `now` has off their default. `output` is not
    compared (where results go changes nothing trained)."""
    now = {k: v for k, v in now.items() if k != "output"}
    return differences(older, keys_like(now, older)) + added_off_default(root, now, older)

