"""The pre-flight scan for `data.cache: disk`: every item decoded and checked exactly as the
in-memory scan does (`harness.data.scan`), but written into the on-disk store (`harness.data.store`)
shard by shard instead of held, so memory does not grow with the dataset. Shards whose items have
not changed since an earlier scan are reused, not decoded again.

The examples keep the in-memory order (training items in listing order, then validation ones, then
test ones),
so a run streamed from disk sees the very same batches as the same run held in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

from harness.config.schema import DataSpec
from harness.data.duplicates import across_splits
from harness.data.scan import Scan, _load_item, _target_size, bad_data_error, has_float_images, listed_count, scan_facts
from harness.data.splits import SPLITS, check_split_counts, split_of, used_sizes
from harness.data.sources import Item
from harness.data.store import ExampleStore, RecordShape, fill_store, prune_store, shard_boundaries, write_shard


def scan_to_disk(items: list[Item], spec: DataSpec, multiple: int, folder: Path, least: int = 1) -> Scan:
    began = time.perf_counter()
    problems = list(getattr(items, "problems", []))
    size, size_reason = _target_size(items, spec, multiple, least)
    floats = has_float_images(items)
    shape = RecordShape((*size, spec.channels), "float32" if floats else "uint8", tuple(size))
    # The settings a decoded example depends on key its shard: one left at its default adds nothing,
    # so a store written before that setting existed is still reused.
    optional = (("ignore_label", spec.ignore_label, None), ("exif_orientation", spec.exif_orientation, "ignore"), ("mask_threshold", spec.mask_threshold, None))
    settings = json.dumps([spec.channels, spec.classes, spec.palette, spec.fit, list(size), shape.image_dtype, 1] + ([sorted(spec.label_map.items())] if spec.label_map else [])
                          + [{name: value} for name, value, default in optional if value != default])
    parts = {name: [item for item in items if split_of(item, spec.val_fraction, spec.test_fraction) == name] for name in SPLITS}
    bounds = {name: shard_boundaries([i.name for i in part]) for name, part in parts.items()}
    groups = [parts[name][a:b] for name in SPLITS for a, b in bounds[name]]

    def decode(item: Item):
        result = _load_item(item, spec, size)
        if isinstance(result, str) or not floats or result[0].dtype != np.uint8:
            return result
        return (result[0].astype(np.float32) / 255.0, *result[1:])  # as the in-memory scan makes mixed sources float

    shards, decoded = fill_store(folder, settings, shape, groups, _stamp, decode, workers=min(32, 2 * (os.cpu_count() or 1)))
    pruned_files, freed_bytes = prune_store(folder, {shard.key for shard in shards}, time.time())
    for shard in shards:
        problems += shard.info["problems"]
    first = {"train": 0, "val": len(bounds["train"]), "test": len(bounds["train"]) + len(bounds["val"])}
    counts = {name: sum(s.count for s in shards[first[name] : first[name] + len(bounds[name])]) for name in SPLITS}
    if problems and spec.on_bad_data == "fail":
        raise bad_data_error(spec, problems, items)
    check_split_counts(spec, counts)
    sizes = used_sizes(spec, counts)
    train_size, val_size = sizes["train"], sizes["val"]
    # Examples a size cap leaves out are skipped over: the used ones of each split follow each other.
    skips = ((train_size, counts["train"] - train_size), (train_size + val_size, counts["val"] - val_size))
    keys = [shard.key for shard in shards]
    store = ExampleStore(folder, shape, shards, skips=skips, rebuild=lambda i: write_shard(folder, keys[i], shape, groups[i], decode))
    notes, labels = Counter(getattr(items, "notes", {})), Counter()
    for shard in shards:
        notes.update(shard.info["notes"])
        labels.update({k: v for k, v in shard.info["label_counts"].items()})
    seconds = time.perf_counter() - began
    label_counts = dict(sorted(labels.items(), key=lambda kv: int(kv[0])))  # over every cached example
    facts = scan_facts(spec, listed_count(items), sum(sizes.values()), problems, notes, size, size_reason, seconds, label_counts)
    facts["duplicates"] = across_splits({name: _named_digests(shards[first[name] : first[name] + len(bounds[name])], sizes[name]) for name in SPLITS})
    facts["cache"] = {"folder": str(folder), "shards": len(shards), "decoded": decoded, "reused": len(items) - decoded, "bytes": store.disk_bytes,
                      "pruned_files": pruned_files, "freed_bytes": freed_bytes}
    return Scan(None, None, train_size, val_size, tuple(size), facts, store=store, test_size=sizes["test"])


def _named_digests(shards, used: int) -> list[tuple[str, str]]:
    """(name, image digest) of a split's first `used` examples."""
    return [pair for shard in shards for pair in zip(shard.info["items"], shard.info["image_digests"])][:used]


def _stamp(item: Item) -> bytes:
    """What decides an item's record: its name and, per part, a file's path, size and modification
    time, or the bytes of an in-memory part; for an array's image, also the array's full brightness
    (sources.array_top), which another image of the array can move."""
    digest = hashlib.sha256(item.name.encode() + (b"" if item.image_top is None else f"\0{item.image_top}".encode()))
    for part in (item.image, item.mask):
        if isinstance(part, Path):
            stat = part.stat()
            digest.update(f"{part}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        elif isinstance(part, bytes):
            digest.update(hashlib.sha256(part).digest())
        else:
            array = np.ascontiguousarray(part)
            digest.update(f"{array.dtype}{array.shape}".encode() + hashlib.sha256(memoryview(array).cast("B")).digest())
    return digest.digest()
