"""What changed between a run's recorded config (run.json `config`) and a config now.

A setting harness added after a run was made is absent from that run's record. It is added at a
default meant to keep what harness did before it, so it is not a change of the experiment: the
fingerprint is compared on the keys the older record had too (`keys_like`), and the differences
listed are those of its keys (`differences`). `resume` and `harness nightly` (is tonight's run
this experiment's?) decide with the same rule.
"""

from __future__ import annotations

from typing import Any


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


def changed_since(older: dict, now: dict) -> list[str]:
    """`differences` between a run's recorded config and `now`, on the keys the record has: a
    setting added to harness since that run is not listed (it was not the experiment's)."""
    return differences(older, keys_like(now, older))
