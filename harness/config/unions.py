"""A value that fits no branch of a union (`data.image_size: [height, width] | auto`) is reported by
pydantic once per branch, each under the branch's internal name (`tuple[constrained-int,
constrained-int]`, `literal['auto']`); here it becomes one problem that says what the key takes."""

from __future__ import annotations

import re
from typing import Any

_BRANCH = re.compile(r"^(tuple|literal|list|dict|set)\[(.*)\]$")
_NAMES = {"int": "integer", "constrained-int": "integer", "float": "number", "constrained-float": "number", "str": "text"}
# A branch that failed only because the value is of another shape says nothing the union's own line
# does not; a branch that failed inside (an item too small, one missing) says what to fix.
_SHAPE_ONLY = {"tuple_type", "list_type", "dict_type", "literal_error"}

Branches = list[tuple[str, tuple, dict]]  # (branch tag, the loc inside the branch, pydantic's error)


def split_union_errors(errors: list[dict]) -> tuple[dict[tuple, Branches], list[dict]]:
    """pydantic's errors, those of union branches grouped by the key they are about."""
    unions: dict[tuple, Branches] = {}
    rest = []
    for err in errors:
        loc = err["loc"]
        at = next((i for i, part in enumerate(loc) if isinstance(part, str) and _BRANCH.match(part)), None)
        if at is None:
            rest.append(err)
        else:
            unions.setdefault(loc[:at], []).append((loc[at], loc[at + 1:], err))
    return unions, rest


def describe_union(where: str, branches: Branches) -> str:
    """`data.image_size: expected a list of 2 integers or auto (got [64]): item 2 is missing`."""
    tags = list(dict.fromkeys(tag for tag, _, _ in branches))
    got = next((err["input"] for _, inner, err in branches if not inner), branches[0][2].get("input"))
    details = [_detail(inner, err) for tag, inner, err in branches if err["type"] not in _SHAPE_ONLY]
    detail = f": {details[0]}" if details else _written_as_text(got, tags)
    return f"{where}: expected {' or '.join(_branch_text(tag) for tag in tags)} (got {got!r}){detail}"


def _branch_text(tag: str) -> str:
    kind, inner = _BRANCH.match(tag).groups()
    items = [item.strip() for item in inner.split(",")]
    if kind == "literal":
        return " or ".join(item.strip("'\"") for item in items)
    if kind == "tuple" and len(set(items)) == 1:
        return f"a list of {len(items)} {_NAMES.get(items[0], items[0])}s"
    return tag


def _detail(inner: tuple, err: dict) -> str:
    ctx = err.get("ctx") or {}
    if err["type"] == "too_long":
        return f"{ctx.get('actual_length')} items, at most {ctx.get('max_length')}"
    item = f"item {inner[0] + 1}" if inner and isinstance(inner[0], int) else ".".join(map(str, inner))
    if err["type"] == "missing":
        return f"{item} is missing" if item else "missing"
    return f"{item}: {err['msg']}" if item else err["msg"]


def _written_as_text(got: Any, tags: list[str]) -> str:
    """`96x96` or `96, 96` for a list of two numbers: say how YAML writes a list."""
    sides = re.fullmatch(r"\s*(\d+)\s*[x,X ]\s*(\d+)\s*", got) if isinstance(got, str) else None
    wanted = any(tag.startswith("tuple[") for tag in tags)
    return f"; write it as a list: [{sides[1]}, {sides[2]}]" if sides and wanted else ""
