"""The bench's `stream` section: a folder of real PNG files trained held in memory (`data.cache:
memory`) and streamed from the on-disk store (`data.cache: disk`, first run: scanned and written;
second run: every shard reused), end to end through the real CLI: wall time, peak memory, images
per second of the fused step, the input pipeline's share of the step, scan throughput (pairs per
second) and the store's size on disk. Then the input pipeline's share of the quickstart's four
networks (the tiny suite's models in the tiny bench) on the same files, held in memory and
streamed, over alternating rounds; and the store's format against a memory map of the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from harness.bench.scale import _WRAPPER
from harness.bench.timing import _section


def bench_stream(folder: Path, images: int, side: int, steps: int, quickstart: bool, rounds: int) -> pd.DataFrame:
    data_dir = make_pictures(folder / f"stream-data-{images}x{side}", images, side)
    base = {
        "name": "stream", "seed": 0,
        "data": {"source": "folder", "images": str(data_dir / "images"), "masks": str(data_dir / "masks"),
                 "image_size": [side, side], "batch_size": 16, "val_fraction": 0.02},
        "models": [{"name": "fcn", "arch": "tiny_fcn"}],
        "train": {"steps": steps, "steps_per_call": 10},
        "output": {"probe_steps": 5, "progress": "none", "tensorboard": False, "sample_images": 0, "export": False},
    }
    results = folder / "stream-runs"
    rows = []
    for contender, cache in (("held in memory", "memory"), ("streamed, store written", "disk"), ("streamed, store reused", "disk")):
        rows.append(_row(contender, _run({**base, "data": {**base["data"], "cache": cache}}, folder, results)))
    cache_dir = results / "stream" / ".data-cache"
    if quickstart:
        networks = [{"name": n.lower(), "arch": n, "backbone": "resnet18"} for n in ("Unet", "Linknet", "FPN", "PSPNet")]
        rows += input_share_rows("quickstart's 4 networks at 96x96", base, networks, 96, cache_dir, rounds, 10)
    else:
        rows += input_share_rows(f"the suite's models at {side}x{side}", base, base["models"], side, cache_dir, rounds, 2)
    rows += format_rows(cache_dir)
    if share := checksum_share(rows):
        rows.append(share)
    return _section("stream", rows)


def input_share_rows(what: str, base: dict, models: list[dict], side: int, cache_dir: Path, rounds: int, steps: int = 10) -> list[dict]:
    """The input pipeline's share of the fused step for `models` on the bench's files at
    side x side, held in memory and streamed from the store (`input_share_row`: alternating rounds
    of `steps` steps on the real pipeline and on batches held in memory)."""
    from harness.bench.sections import input_share_row
    from harness.config.loading import validate_config
    from harness.data.resolve import resolve_data

    rows = []
    for label, cache in (("held in memory", "memory"), ("streamed", "disk")):
        config = validate_config({**base, "models": models, "data": {**base["data"], "cache": cache, "image_size": [side, side], "batch_size": 8}})
        config, scan = resolve_data(config, cache_dir=cache_dir)
        rows.append(input_share_row(f"input share, {what}: {label}", config, rounds, steps, scan=scan))
    return rows


def make_pictures(root: Path, count: int, side: int) -> Path:
    """`count` image/mask pairs (PNG): shapes over a gradient, which compress as photographs do
    (about a tenth of their decoded size). Made once per size, kept for the next bench."""
    from PIL import Image

    if (root / "done").exists():
        return root
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    ramp = np.linspace(0, 120, side, dtype=np.float32)

    def one(i: int) -> None:
        rng = np.random.default_rng(i)
        mask = np.zeros((side, side), np.uint8)
        for _ in range(3):
            top, left = rng.integers(0, side * 3 // 4, 2)
            height, width = rng.integers(side // 10, side // 3, 2)
            mask[top : top + height, left : left + width] = 1
        image = ramp[None, :, None] + ramp[:, None, None] / 2 + 100 * mask[..., None] * rng.uniform(0.5, 1, 3)
        image += rng.normal(0, 4, image.shape)
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(root / "images" / f"{i:06d}.png", compress_level=1)
        Image.fromarray(mask * 255).save(root / "masks" / f"{i:06d}.png")

    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        list(pool.map(one, range(count)))
    (root / "done").write_text("complete\n")
    return root


def _run(config: dict, folder: Path, results: Path) -> dict:
    path = folder / "stream.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    command = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "harness", "run", str(path), "--results", str(results)]
    done = subprocess.run(command, capture_output=True, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["code"] != 0:
        raise RuntimeError(f"stream bench run failed (exit {figures['code']}): {figures['stderr']}")
    newest = max((results / config["name"]).glob("[0-9]*/run.json"), key=lambda p: p.stat().st_mtime)
    return {**figures, "info": json.loads(newest.read_text(encoding="utf-8")), "batch": config["data"]["batch_size"]}


def _row(contender: str, run: dict) -> dict:
    timing, data = run["info"]["timing"], run["info"]["data"]
    ms = timing.get("fused_ms_per_step")
    cache = data.get("cache") or {}
    return {
        "contender": contender, "end_to_end_s": round(run["seconds"], 2), "peak_rss_mb": round(run["peak_rss_mb"], 1),
        "images_per_s": round(1000 * run["batch"] / ms, 1) if ms else None, "input_wait_share": timing.get("input_wait_share"),
        "scan_pairs_per_s": data.get("scan_items_per_s"), "examples": data.get("used"),
        "store_mb": round(cache["bytes"] / 2**20, 1) if cache else None, "decoded": cache.get("decoded"),
    }


def format_rows(cache: Path, reads: int = 2000) -> list[dict]:
    """Random reads by example index from the store's shards: one positional read per record (what
    the pipeline does) vs a memory map of the same files. Speed, and resident memory afterwards: a
    map's pages count as the process's own once touched; a read's stay in the kernel's cache."""
    shards = sorted(cache.glob("shard-*.bin"))
    if not shards:
        return []
    size = json.loads(shards[0].with_suffix(".json").read_text())["record_size"]
    files = [(p, p.stat().st_size // size) for p in shards if p.stat().st_size >= size]
    rng = np.random.default_rng(0)
    picks = [(files[i][0], int(rng.integers(files[i][1]))) for i in rng.integers(len(files), size=reads)]
    warm = _pread_reader(files, size)
    for path, slot in picks:  # both read from the kernel's cache: the comparison is of the access, not the disk
        warm(path, slot)
    rows = []
    readers = (("format: pread of fixed-size records (the store)", _pread_reader(files, size)),
               ("format: pread + CRC-32 check of each record (the store as it reads)", _checked_reader(files, size)),
               ("format: memory map of the same records", _mmap_reader(files, size)))
    for name, read in readers:
        before = _rss_mb()
        began = time.perf_counter()
        total = sum(int(read(path, slot)[0]) for path, slot in picks)
        seconds = time.perf_counter() - began
        rows.append({"contender": name, "reads_per_s": round(reads / seconds, 1), "rss_growth_mb": round(_rss_mb() - before, 1), "checksum": total})
    return rows


def _pread_reader(files, size: int):
    descriptors = {path: os.open(path, os.O_RDONLY) for path, _ in files}
    return lambda path, slot: np.frombuffer(os.pread(descriptors[path], size, slot * size), np.uint8)


def _checked_reader(files, size: int):
    descriptors = {path: os.open(path, os.O_RDONLY) for path, _ in files}
    sums = {path: json.loads(path.with_suffix(".json").read_text())["crc32"] for path, _ in files}

    def read(path, slot):
        raw = os.pread(descriptors[path], size, slot * size)
        if zlib.crc32(raw) != sums[path][slot]:
            raise RuntimeError(f"{path}: record {slot} fails its checksum")
        return np.frombuffer(raw, np.uint8)

    return read


def checksum_share(rows: list[dict]) -> dict | None:
    """What checking each record costs, as a share of the streamed run's images per second: the
    extra time per read (checked minus plain pread, side by side) times images per second."""
    by = {r["contender"]: r for r in rows}
    plain = by.get("format: pread of fixed-size records (the store)")
    checked = by.get("format: pread + CRC-32 check of each record (the store as it reads)")
    streamed = by.get("streamed, store reused")
    if not (plain and checked and streamed and streamed.get("images_per_s")):
        return None
    extra_s = max(0.0, 1 / checked["reads_per_s"] - 1 / plain["reads_per_s"])
    return {"contender": "checksum cost: share of the streamed images/s", "checksum_us_per_read": round(1e6 * extra_s, 2),
            "share_of_streamed_images_per_s": round(extra_s * streamed["images_per_s"], 5)}


def _mmap_reader(files, size: int):
    maps = {path: np.memmap(path, np.uint8, "r", shape=(count, size)) for path, count in files}
    return lambda path, slot: np.array(maps[path][slot])


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
