"""Images that are in two splits. A validation or test image that is, pixel for pixel, a training
image (or a test image that is a validation one) is scored on what the models were trained (or
chosen) on: its score measures memory, not generalization, and it favours the models that memorize
best. Found while the images are decoded anyway: one 128-bit BLAKE2 hash per image.

Exact copies only, after decoding and fitting to `image_size` (a file copied into two folders,
the same picture under two names); a copy re-encoded, resized or cropped is not found. Copies
within one split are not counted: they leak nothing.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

from harness.config.schema import DataSpec

SHOWN = 10  # copies named in run.json and in the warning's first lines


def image_digest(image: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).hexdigest()


def across_splits(named: dict[str, Iterable[tuple[str, str]]]) -> dict:
    """run.json's `data.duplicates` from each split's used examples as (name, digest), the splits
    in the scan's order (train, val, test): how many validation and test images repeat an earlier
    split's, and the first few pairs by name."""
    seen: dict[str, tuple[str, str]] = {}
    counts = {"val_in_train": 0, "test_in_train": 0, "test_in_val": 0}
    examples = []
    for split, examples_of_split in named.items():
        for name, digest in examples_of_split:
            earlier = seen.setdefault(digest, (split, name))
            if earlier[0] != split:
                counts[f"{split}_in_{earlier[0]}"] += 1
                if len(examples) < SHOWN:
                    examples.append(f"{split} {name} = {earlier[0]} {earlier[1]}")
    return {**counts, "examples": examples}


def duplicates_warning(facts: dict | None, data: DataSpec) -> str | None:
    """What the user is told when images repeat across splits (None when none do); `data` with
    the sizes the scan resolved."""
    if not facts or not any(facts.get(key) for key in ("val_in_train", "test_in_train", "test_in_val")):
        return None
    parts = []
    if facts.get("test_in_train") or facts.get("test_in_val"):
        sources = {"training": facts["test_in_train"], "validation": facts["test_in_val"]}
        named = [kind for kind, count in sources.items() if count]
        of = f"{named[0]} images" if len(named) == 1 else "training ({training}) or validation ({validation}) images".format(**sources)
        parts.append(f"{sum(sources.values())} of {data.test_size or 0} test images are copies of {of}")
    if facts.get("val_in_train"):
        parts.append(f"{facts['val_in_train']} of {data.val_size or 0} validation images are copies of training images")
    return (f"{'; '.join(parts)} (pixel for pixel, e.g. {facts['examples'][0]}): their scores measure what the models saw, "
            "not how they generalize; take the copies out of one split (run.json data.duplicates names them)")

