"""Which split each example is in, and how many of each are used.

An example's split is the one its source gave (a manifest's column, separate folders or arrays, a
TFDS split), else drawn by a hash of its name (a file's stem): each example on its own, so that
adding files never moves another between splits. The test share has its own hash, drawn first.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.config.schema import DataSpec
from harness.errors import DataError

from harness.data.sources import REST, Item


SPLITS = ("train", "val", "test")


def split_of(item: Item, val_fraction: float, test_fraction: float = 0.0) -> str:
    """An item's split: the one its source gave, else by hashes of its stem: test first (its own
    hash, so adding a test share leaves train and val as they were among the rest), then val.
    Adding files never moves another file between splits."""
    if item.split not in (None, REST):
        return item.split
    key = Path(item.name).stem if "[" not in item.name else item.name
    if test_fraction and _unit_hash("test:" + key) < test_fraction:
        return "test"
    return "val" if item.split is None and _unit_hash(key) < val_fraction else "train"


def _unit_hash(key: str) -> float:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


def check_split_counts(spec: DataSpec, counts: dict[str, int]) -> None:
    if counts["val"] == 0 or counts["train"] == 0:
        raise DataError(f"data.source {spec.source}: {counts['train']} training and {counts['val']} validation examples; "
                        f"both need at least one (data.val_fraction){_few_files_hint(spec, counts)}")
    if counts["test"] == 0 and (spec.test_fraction > 0 or spec.test_images is not None):
        raise DataError(f"data.source {spec.source}: no test examples (data.test_fraction {spec.test_fraction:g} of {sum(counts.values())} files, or empty test folders)")


def _few_files_hint(spec: DataSpec, counts: dict[str, int]) -> str:
    """Why a fraction of a few examples can give none: each one's split is its own draw (a hash of
    its name, so that adding files never moves others), not a share cut from the count."""
    if counts["val"] or not spec.val_fraction:
        return ""
    examples = counts["train"] + counts["val"]
    return (f". Each example's split is drawn by a hash of its name, a file's stem (adding files never moves others), not cut "
            f"as a share: {examples} examples at {spec.val_fraction:g} expect {examples * spec.val_fraction:.1f} for validation and drew none. "
            "Raise data.val_fraction, or name the validation examples (val folders or arrays, a manifest's split column)")


def used_sizes(spec: DataSpec, counts: dict[str, int]) -> dict[str, int]:
    """How many examples of each split are used: all of them, or the number the config caps it at."""
    caps = {"train": spec.train_size, "val": spec.val_size, "test": spec.test_size}
    return {name: min(counts[name], caps[name] or counts[name]) for name in SPLITS}
