"""The on-disk cache of decoded examples (`data.cache: disk`), read by example index while training,
so a dataset larger than memory trains with memory that does not grow with it.

Layout, beside the runs (`results/<name>/.data-cache/`): shards of up to about SHARD_MEAN examples,
each `shard-<key>.bin` (fixed-size records: the image's bytes, then the labels') and
`shard-<key>.json` (the items it holds, its bad items with their reasons, notes, label counts).

- **Keyed by content**: a shard's key hashes the decode settings and, for each of its items, the
  name, size and modification time of its files (or the bytes of an in-memory item). Shard
  boundaries are content-defined (an item whose name hashes to 0 mod SHARD_MEAN ends a shard), so
  adding, removing or changing one file rebuilds only the shard it falls in; the others are reused
  across runs and nights.
- **Never half-read**: each file is written under a temporary name and renamed; the .json, written
  last, marks the shard complete, and a .bin of the wrong size is ignored and rebuilt. A full disk
  removes the temporary files and exits 4 naming the path.
- **Verified on every read**: the .json holds a CRC-32 of each record, checked on each read (about
  3 us for a 64x64 record; the stream bench measures it). A record that fails (bytes changed on
  disk under the same size) has its shard rebuilt from its source files at once; if the rebuilt
  record matches the checksum written with the shard, the source was intact and training goes on
  with the very same bytes; if not, the source changed since the store was written, and the run
  stops with exit 3 naming the item and the file.
- **Bounded on disk**: every scan marks the shards it uses (their .json's modification time) and
  removes shards no scan has used for UNUSED_FOR_S, and a killed write's leftovers (a temporary
  file, a .bin without its .json) older than LEFTOVER_FOR_S; so the store holds what recent runs
  need, not every version of the data it has seen. Another setting's recent shards are kept.
- **Random access at full speed**: fixed-size records, read with one positional read (`os.pread`)
  each; the page cache, not the process, holds what was read, so resident memory stays flat.
  Measured against TFRecord + index and memory-mapped .npy (README, "Datasets larger than memory").
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import json
import os
import sys
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.data.duplicates import image_digest
from harness.errors import DataError, ResourceError

SHARD_MEAN = 256  # examples per shard, on average
UNUSED_FOR_S = 14 * 86400  # a shard no scan has used for two weeks is removed (a night's run keeps its own fresh)
LEFTOVER_FOR_S = 86400  # a live write finishes a shard in minutes: a day-old temporary file is a killed write's


@dataclass(frozen=True)
class RecordShape:
    image: tuple[int, ...]  # (H, W, C)
    image_dtype: str  # uint8 or float32
    labels: tuple[int, ...]  # (H, W), uint8

    @property
    def image_bytes(self) -> int:
        return int(np.prod(self.image)) * np.dtype(self.image_dtype).itemsize

    @property
    def size(self) -> int:
        return self.image_bytes + int(np.prod(self.labels))


def shard_boundaries(names: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each shard over `names`: an item whose name hashes to 0 mod SHARD_MEAN ends
    its shard, so one item more or less moves no boundary but its own shard's."""
    spans, start = [], 0
    for i, name in enumerate(names):
        if int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % SHARD_MEAN == 0 or i - start + 1 >= 4 * SHARD_MEAN:
            spans.append((start, i + 1))
            start = i + 1
    if start < len(names):
        spans.append((start, len(names)))
    return spans


def shard_paths(folder: Path, key: str) -> tuple[Path, Path]:
    """A shard's record file and its JSON: the one place their names are spelled."""
    return folder / f"shard-{key}.bin", folder / f"shard-{key}.json"


def shard_key(path: Path) -> str:
    return path.stem.removeprefix("shard-")


@dataclass
class Shard:
    key: str
    count: int  # good examples in it
    info: dict[str, Any]  # its .json


def write_shard(folder: Path, key: str, shape: RecordShape, items: list, decode: Callable) -> Shard:
    """Decode `items` one at a time and write each good one's record at once (memory holds one
    example, not a shard); `decode(item)` gives (image, labels, notes) or the reason it is bad."""
    info: dict[str, Any] = {"items": [], "problems": [], "notes": {}, "label_counts": {}, "record_size": shape.size, "crc32": [], "image_digests": []}
    counts = np.zeros(256, np.int64)
    bin_path, json_path = shard_paths(folder, key)
    with _atomic(bin_path) as handle:
        for item in items:
            result = decode(item)
            if isinstance(result, str):
                info["problems"].append(f"{item.name}: {result}")
                continue
            image, labels, notes = result
            pixels = np.ascontiguousarray(image, dtype=shape.image_dtype)
            record = pixels.tobytes() + np.ascontiguousarray(labels, dtype=np.uint8).tobytes()
            handle.write(record)
            info["image_digests"].append(image_digest(pixels))  # copies across splits (data/duplicates.py)
            info["crc32"].append(zlib.crc32(record))
            info["items"].append(item.name)
            for note in notes:
                info["notes"][note] = info["notes"].get(note, 0) + 1
            counts += np.bincount(labels.ravel(), minlength=256)[:256]
    info["label_counts"] = {str(k): int(v) for k, v in enumerate(counts) if v}
    with _atomic(json_path) as handle:
        handle.write(json.dumps(info).encode())
    return Shard(key, len(info["items"]), info)


def read_shard(folder: Path, key: str, shape: RecordShape) -> Shard | None:
    """A complete shard (its .json present with a checksum and an image digest per record, its .bin
    the size the .json says), else None: rebuilt. (Shards written before checksums, or before
    digests, are rebuilt once.)"""
    try:
        bin_path, json_path = shard_paths(folder, key)
        info = json.loads(json_path.read_text(encoding="utf-8"))
        if info.get("record_size") != shape.size or bin_path.stat().st_size != shape.size * len(info["items"]):
            return None
        if not len(info.get("crc32") or ()) == len(info.get("image_digests") or ()) == len(info["items"]):
            return None
    except (OSError, ValueError, KeyError):
        return None
    return Shard(key, len(info["items"]), info)


class _atomic:
    """Write to a temporary file beside `path`, rename on success; remove it on any failure. A
    full disk becomes exit 4 naming the path."""

    def __init__(self, path: Path):
        self.path = path
        self.partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")

    def __enter__(self):
        self.handle = self.partial.open("wb")
        return self.handle

    def __exit__(self, kind, exc, tb) -> None:
        try:
            self.handle.close()
            if exc is None:
                os.replace(self.partial, self.path)
        except OSError as error:
            exc = error
        if exc is not None:
            self.partial.unlink(missing_ok=True)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceError(f"data.cache: disk: no space left writing {self.path}; free space there (or set data.cache: memory)") from None
            if exc is not None and kind is None:
                raise exc


@dataclass
class ExampleStore:
    """Examples 0..N-1 (train first, then validation, then test) across shards, read by index."""

    folder: Path
    shape: RecordShape
    shards: list[Shard]
    # (from, count) per gap: examples a size cap leaves out (data.train_size, data.val_size), skipped
    # over so that the used examples of train, val and test follow each other.
    skips: tuple[tuple[int, int], ...] = ()
    starts: list[int] = field(default_factory=list)  # first example index of each shard
    # Writes shard i again from its source files (the scan's items): how a corrupt record is repaired.
    rebuild: Callable[[int], Shard] | None = field(default=None, repr=False)
    _files: dict[int, int] = field(default_factory=dict, repr=False)  # shard -> open descriptor
    # Descriptors of shards rebuilt since they were opened: another reader (tf.data reads in
    # parallel) may be about to read through one, so they are closed with the store, not at once.
    _retired: list[int] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        self.starts = list(np.cumsum([0] + [s.count for s in self.shards[:-1]]))

    def __len__(self) -> int:
        return sum(s.count for s in self.shards)  # every cached example, used or not

    def read(self, index) -> tuple[np.ndarray, np.ndarray]:
        """(image, labels) of example `index`: one positional read."""
        index = int(index)
        index += sum(count for start, count in self.skips if index >= start)
        shard = bisect.bisect_right(self.starts, index) - 1
        position = index - self.starts[shard]
        raw = os.pread(self._descriptor(shard), self.shape.size, position * self.shape.size)
        if zlib.crc32(raw) != self.shards[shard].info["crc32"][position]:
            raw = self._repair(shard, position)
        split = self.shape.image_bytes
        image = np.frombuffer(raw, self.shape.image_dtype, count=split // np.dtype(self.shape.image_dtype).itemsize).reshape(self.shape.image)
        return image, np.frombuffer(raw, np.uint8, offset=split).reshape(self.shape.labels)

    def _repair(self, shard: int, position: int) -> bytes:
        """A record that failed its checksum: its shard rebuilt from the source files; the record
        again if the source gave the same bytes, else bad data (exit 3) naming the item."""
        old = self.shards[shard]
        item, path = old.info["items"][position], shard_paths(self.folder, old.key)[0]
        expected = old.info["crc32"][position]
        with self._lock:
            if self.shards[shard] is old:  # another reader may have repaired it already
                if self.rebuild is None:
                    raise DataError(f"data store: the stored record of {item} in {path} fails its checksum "
                                    "(the file changed on disk); delete the file and run again to rebuild it")
                print(f"harness: warning: the stored record of {item} in {path} failed its checksum (changed on disk): "
                      "rebuilding that shard from its source files", file=sys.stderr, flush=True)
                descriptor = self._files.pop(shard, None)
                if descriptor is not None:  # still the old file's: a read through it fails its checksum and comes here
                    self._retired.append(descriptor)
                self.shards[shard] = self.rebuild(shard)
        new = self.shards[shard]
        if new.info["items"] != old.info["items"] or new.info["crc32"][position] != expected:
            raise DataError(f"data store: {item} changed or is gone since the data store was written ({path}): its record "
                            "cannot be rebuilt as it was; run again to scan the data afresh")
        return os.pread(self._descriptor(shard), self.shape.size, position * self.shape.size)

    def _descriptor(self, shard: int) -> int:
        descriptor = self._files.get(shard)
        if descriptor is None:
            with self._lock:
                descriptor = self._files.get(shard)
                if descriptor is None:
                    descriptor = os.open(shard_paths(self.folder, self.shards[shard].key)[0], os.O_RDONLY)
                    self._files[shard] = descriptor
        return descriptor

    def close(self) -> None:
        for descriptor in [*self._files.values(), *self._retired]:
            os.close(descriptor)
        self._files.clear()
        self._retired.clear()

    @property
    def disk_bytes(self) -> int:
        return len(self) * self.shape.size


def fill_store(folder: Path, settings: str, shape: RecordShape, groups: list[list], stamp: Callable, decode: Callable, workers: int) -> tuple[list[Shard], int]:
    """The shards for `groups` (lists of items, in order): each reused when complete and keyed the
    same, else decoded (threads: Pillow releases the GIL) and written. Returns (shards, decoded)."""
    from concurrent.futures import ThreadPoolExecutor

    folder.mkdir(parents=True, exist_ok=True)
    keyed = []
    for items in groups:
        digest = hashlib.sha256(settings.encode())
        for item in items:
            digest.update(stamp(item))
        keyed.append((digest.hexdigest()[:24], items))

    def build(entry) -> tuple[Shard, bool]:
        key, items = entry
        existing = read_shard(folder, key, shape)
        if existing is not None:
            _mark_used(shard_paths(folder, key)[1])
            return existing, False
        return write_shard(folder, key, shape, items, decode), True

    with ThreadPoolExecutor(max_workers=workers) as pool:
        built = list(pool.map(build, keyed))
    return [shard for shard, _ in built], sum(len(items) for (_, items), (_, new) in zip(keyed, built) if new)


def _mark_used(json_path: Path) -> None:
    try:
        os.utime(json_path)
    except OSError:  # a store this user may read but not write
        pass


def prune_store(folder: Path, used: set[str], now: float) -> tuple[int, int]:
    """Remove the shards outside `used` whose .json no scan has marked for UNUSED_FOR_S (the .json
    first, so the shard stops counting before its records go), and a killed write's leftovers (a
    temporary file, a .bin without its .json) older than LEFTOVER_FOR_S. A .bin's own time is when
    it was written, not when it was last used, so it goes with its .json. Returns (files removed,
    bytes freed); a file another process removed first is skipped."""
    dropped: set[str] = set()
    removed, freed = 0, 0

    def remove_if_older(path: Path, limit: float) -> bool:
        nonlocal removed, freed
        try:
            stat = path.stat()
            if now - stat.st_mtime < limit:
                return False
            path.unlink()
        except OSError:  # removed by another process first, or a store this user may not write
            return False
        removed, freed = removed + 1, freed + stat.st_size
        return True

    for path in sorted(folder.glob("shard-*.json")):
        key = shard_key(path)
        if key not in used and remove_if_older(path, UNUSED_FOR_S):
            dropped.add(key)
    for path in sorted(folder.glob("shard-*.bin")):
        key = shard_key(path)
        if key in dropped:
            remove_if_older(path, 0)
        elif key not in used and not path.with_suffix(".json").exists():
            remove_if_older(path, LEFTOVER_FOR_S)
    for path in sorted(folder.glob(".*.partial")):
        remove_if_older(path, LEFTOVER_FOR_S)
    return removed, freed
