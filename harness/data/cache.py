"""The disk cache of scanned data: decoded arrays kept beside the runs, keyed by the files' names,
sizes and modification times, so an unchanged source is decoded once across runs and nights."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from harness.config.schema import DataSpec

from harness.data.scan import Scan
from harness.data.sources import Item


def cache_stamp(spec: DataSpec, items: list[Item], multiple: int) -> str:
    digest = hashlib.sha256(json.dumps([spec.model_dump(mode="json"), multiple]).encode())
    for item in items:
        for part in (item.image, item.mask):
            if isinstance(part, Path):
                stat = part.stat()
                digest.update(f"{part}:{stat.st_size}:{stat.st_mtime_ns}".encode())
            elif isinstance(part, bytes):
                digest.update(hashlib.sha256(part).digest())
            else:
                digest.update(np.ascontiguousarray(part).tobytes())
    digest.update(json.dumps(getattr(items, "problems", [])).encode())
    return digest.hexdigest()[:24]


def read_cache(folder: Path, stamp: str) -> Scan | None:
    path = folder / f"{stamp}.npz"
    try:
        with np.load(path, allow_pickle=False) as archive:
            facts = json.loads(str(archive["facts"]))
            return Scan(archive["images"], archive["labels"], int(archive["train_size"]), int(archive["val_size"]), tuple(facts["image_size"]), {**facts, "cache": str(path)})
    except (OSError, ValueError, KeyError):
        return None  # absent or damaged: scan again


def write_cache(folder: Path, stamp: str, scan: Scan) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{stamp}.npz"
    partial = folder / f".{stamp}.{os.getpid()}.npz"
    try:
        np.savez(partial, images=scan.images, labels=scan.labels, train_size=scan.train_size, val_size=scan.val_size, facts=json.dumps(scan.facts))
        os.replace(partial, final)
    except OSError:
        partial.unlink(missing_ok=True)  # a cache is an optimisation: a full disk must not fail the run here
