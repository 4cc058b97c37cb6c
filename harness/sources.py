"""Real data sources: list the examples, scan every one before training, load them once.

A source lists `Item`s (an image and its mask: file paths, encoded bytes or array slices). The
pre-flight scan decodes every item in parallel threads (Pillow releases the GIL while decoding),
checks it, converts the mask to class labels and fits both to `image_size`; every bad item is
named with its reason. Then `resolve_data` fills the sizes the scan found into the config, and
`data.py` builds the input pipeline from the loaded arrays.

Masks: palette PNGs give their indices; grayscale masks give their values; RGB masks are mapped
through `data.palette` (or read as grayscale when all three channels agree). Binary masks stored
as 0/255 are mapped to 0/1 (with a note); labels outside 0..classes-1 are an error, which for a
JPEG mask is named as what it almost always is: compression artefacts.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import DataSpec, ExperimentConfig
from .errors import ConfigError, DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
JPEG = (".jpg", ".jpeg")


@dataclass(frozen=True)
class Item:
    """One example to scan: `image`/`mask` are paths, encoded bytes or arrays."""

    name: str  # how the user recognises it: "images/cat.png", "train[17]"
    image: Any
    mask: Any
    split: str | None = None  # "train", "val" or None (decided by val_fraction)
    mask_is_jpeg: bool = False
    mask_name: str | None = None  # named in the message when the mask is what is wrong


class BadItem(Exception):
    """An item that cannot be used, and why."""


@dataclass
class Scan:
    """The scanned, loaded data: train examples first, then validation ones."""

    images: np.ndarray  # [N, H, W, C] uint8 or float32 in [0, 1]
    labels: np.ndarray  # [N, H, W] uint8 class ids
    train_size: int
    val_size: int
    image_size: tuple[int, int]
    facts: dict[str, Any] = field(default_factory=dict)  # for run.json
    variables: Any = field(default=None, repr=False)  # the arrays as CPU tf.Variables (data.py)


# ---------------------------------------------------------------------------------------------
# Entry point


_LOADED: dict[str, Scan] = {}  # one scan per process and data spec: run, samples, report share it


def resolve_data(config: ExperimentConfig, cache_dir: Path | None = None) -> tuple[ExperimentConfig, Scan | None]:
    """Scan a real source (exit 3 naming every bad item unless on_bad_data: skip) and return the
    config with the sizes it found filled in. Synthetic data needs no scan."""
    spec = config.data
    if spec.source == "synthetic":
        return config, None
    scan = load_scan(spec, config.input_multiple(), cache_dir)
    update = {"image_size": scan.image_size, "train_size": scan.train_size, "val_size": scan.val_size}
    data = spec.model_copy(update=update)
    _LOADED[_memo_key(data)] = scan  # the pipeline, samples and probe of this process reuse it
    if data.batch_size > data.train_size:
        raise DataError(f"data.batch_size {data.batch_size} is larger than the {data.train_size} training examples found")
    if spec.augment.rotate90 and data.image_size[0] != data.image_size[1]:
        raise ConfigError(f"data.augment.rotate90 needs square images, image_size is {data.image_size[0]}x{data.image_size[1]}")
    return config.model_copy(update={"data": data}), scan


def load_scan(spec: DataSpec, multiple: int, cache_dir: Path | None = None) -> Scan:
    key = _memo_key(spec)
    if key in _LOADED:
        return _LOADED[key]
    items = list_items(spec)
    stamp = _stamp(spec, items, multiple)
    cached = _read_cache(cache_dir, stamp) if spec.cache == "disk" and cache_dir else None
    scan = cached or scan_items(items, spec, multiple)
    if spec.cache == "disk" and cache_dir and cached is None:
        _write_cache(cache_dir, stamp, scan)
    _LOADED[key] = scan
    return scan


def data_facts(spec: DataSpec) -> dict[str, Any]:
    """What run.json says about the data: the scan's findings, or the synthetic task's sizes."""
    scan = _LOADED.get(_memo_key(spec))
    if scan is not None:
        return scan.facts
    return {"source": spec.source, "image_size": list(spec.image_size), "train_size": spec.train_size, "val_size": spec.val_size}


def _memo_key(spec: DataSpec) -> str:
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True)


# ---------------------------------------------------------------------------------------------
# Listing, per source


def list_items(spec: DataSpec) -> list[Item]:
    listing = {"folder": _folder_items, "csv": _csv_items, "arrays": _array_items, "tfds": _tfds_items}[spec.source]
    items = listing(spec)
    if not items and not getattr(items, "problems", None):
        raise DataError(f"data.source {spec.source}: no examples found")
    return items


class _Listing(list):
    """Items plus the problems found while listing (missing or duplicate pairs)."""

    def __init__(self, items=(), problems=()):
        super().__init__(items)
        self.problems = list(problems)


def _must_exist(path: Path | None, what: str, folder: bool) -> Path:
    if path is None or not (path.is_dir() if folder else path.is_file()):
        raise ConfigError(f"data.{what}: {'folder' if folder else 'file'} {str(path)!r} does not exist")
    return path


def _by_stem(folder: Path, what: str) -> tuple[dict[str, Path], list[str], set[str]]:
    found: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS:
            found[path.stem].append(path)
    problems = [
        f"{folder / stem}.*: {len(paths)} {what} files share the stem {stem!r} ({', '.join(p.name for p in paths)}); keep one"
        for stem, paths in found.items()
        if len(paths) > 1
    ]
    doubled = {stem for stem, paths in found.items() if len(paths) > 1}
    return {stem: paths[0] for stem, paths in found.items() if len(paths) == 1}, problems, doubled


def _folder_pair(images_dir: Path, masks_dir: Path, split: str | None) -> _Listing:
    images, problems, doubled = _by_stem(images_dir, "image")
    masks, mask_problems, mask_doubled = _by_stem(masks_dir, "mask")
    problems += mask_problems
    doubled |= mask_doubled  # already named: not also a missing pair
    problems += [f"{images[s]}: no mask with the stem {s!r} in {masks_dir}" for s in sorted(set(images) - set(masks) - doubled)]
    problems += [f"{masks[s]}: no image with the stem {s!r} in {images_dir}" for s in sorted(set(masks) - set(images) - doubled)]
    items = [
        Item(str(images[s]), images[s], masks[s], split, masks[s].suffix.lower() in JPEG, str(masks[s]))
        for s in sorted((set(images) & set(masks)) - doubled)
    ]
    return _Listing(items, problems)


def _folder_items(spec: DataSpec) -> _Listing:
    listing = _folder_pair(_must_exist(spec.images, "images", True), _must_exist(spec.masks, "masks", True), None if spec.val_images is None else "train")
    if spec.val_images is not None or spec.val_masks is not None:
        val = _folder_pair(_must_exist(spec.val_images, "val_images", True), _must_exist(spec.val_masks, "val_masks", True), "val")
        listing = _Listing([*listing, *val], listing.problems + val.problems)
    return listing


def _csv_items(spec: DataSpec) -> _Listing:
    manifest = _must_exist(spec.manifest, "manifest", False)
    base = manifest.parent
    with manifest.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = {"image", "mask"} - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"data.manifest {manifest}: needs the columns image and mask (and optionally split); missing: {', '.join(sorted(missing))}")
        rows = list(reader)
    items, problems, seen = [], [], Counter(r["image"] for r in rows)
    for line, row in enumerate(rows, start=2):
        image, mask = base / row["image"], base / row["mask"]
        where = f"{manifest}:{line}"
        split = (row.get("split") or "").strip().lower() or None
        if seen[row["image"]] > 1:
            problems.append(f"{where}: {row['image']} is listed {seen[row['image']]} times")
            continue
        if split not in (None, "train", "val"):
            problems.append(f"{where}: split must be train or val, got {row['split']!r}")
            continue
        absent = [str(p) for p in (image, mask) if not p.is_file()]
        if absent:
            problems.append(f"{where}: file does not exist: {', '.join(absent)}")
            continue
        items.append(Item(str(image), image, mask, split, mask.suffix.lower() in JPEG, str(mask)))
    return _Listing(items, problems)


def _array_items(spec: DataSpec) -> _Listing:
    if spec.arrays is not None:
        path = _must_exist(spec.arrays, "arrays", False)
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        except (OSError, ValueError) as exc:
            raise DataError(f"data.arrays {path}: cannot be read as .npz: {exc}") from None
        names = {"images": _first(arrays, "images", "x", "image"), "masks": _first(arrays, "masks", "y", "mask")}
        if names["images"] is None or names["masks"] is None:
            raise DataError(f"data.arrays {path}: needs arrays named images and masks (or x and y); it has {', '.join(arrays) or 'none'}")
        parts = [("train" if "val_images" in arrays else None, arrays[names["images"]], arrays[names["masks"]], path.name)]
        if "val_images" in arrays and "val_masks" in arrays:
            parts.append(("val", arrays["val_images"], arrays["val_masks"], f"{path.name}:val"))
    else:
        loaded = []
        for what in ("images", "masks"):
            path = _must_exist(getattr(spec, what), what, False)
            try:
                loaded.append(np.load(path, allow_pickle=False, mmap_mode="r"))
            except (OSError, ValueError) as exc:
                raise DataError(f"data.{what} {path}: cannot be read as .npy: {exc}") from None
        parts = [(None, loaded[0], loaded[1], spec.images.name)]
    items, problems = [], []
    for split, images, masks, label in parts:
        if len(images) != len(masks):
            problems.append(f"{label}: {len(images)} images but {len(masks)} masks")
            continue
        items += [Item(f"{label}[{i}]", images[i], masks[i], split) for i in range(len(images))]
    return _Listing(items, problems)


def _first(arrays: dict, *names: str) -> str | None:
    return next((n for n in names if n in arrays), None)


def _tfds_items(spec: DataSpec) -> _Listing:
    """Read a prepared TFDS dataset straight from its files (dataset_info.json + TFRecord shards
    of tf.train.Example with encoded images), so tensorflow-datasets itself is not needed."""
    from .backend import import_tf

    tf = import_tf()
    tfds = spec.tfds
    folder = _tfds_folder(tfds.data_dir, tfds.name)
    info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
    dataset = info.get("name") or tfds.name.split("/")[0]
    splits = [(tfds.train_split, "train" if tfds.val_split else None)] + ([(tfds.val_split, "val")] if tfds.val_split else [])
    items, problems = [], []
    features = {k: tf.io.FixedLenFeature([], tf.string) for k in (tfds.image_key, tfds.mask_key)}
    for split_name, split in splits:
        shards = sorted(folder.glob(f"{dataset}-{split_name}.tfrecord*"))
        if not shards:
            known = sorted({p.name.split("-")[1].split(".")[0] for p in folder.glob(f"{dataset}-*.tfrecord*")})
            raise ConfigError(f"data.tfds: no split {split_name!r} in {folder} (splits on disk: {', '.join(known) or 'none'})")
        for i, record in enumerate(tf.data.TFRecordDataset([str(s) for s in shards])):
            name = f"{dataset}/{split_name}[{i}]"
            try:
                example = tf.io.parse_single_example(record, features)
            except tf.errors.InvalidArgumentError as exc:
                problems.append(f"{name}: not an example with {tfds.image_key!r} and {tfds.mask_key!r}: {exc.message.splitlines()[0]}")
                continue
            mask = example[tfds.mask_key].numpy()
            items.append(Item(name, example[tfds.image_key].numpy(), mask, split, mask[:3] == b"\xff\xd8\xff"))
    return _Listing(items, problems)


def _tfds_folder(data_dir: Path, name: str) -> Path:
    """data_dir/name[/config]/version: the given version, or the newest one on disk."""
    root = _must_exist(data_dir, "tfds.data_dir", True) / name
    candidates = sorted(root.glob("dataset_info.json")) + sorted(root.glob("*/dataset_info.json")) + sorted(root.glob("*/*/dataset_info.json"))
    if not candidates:
        raise ConfigError(f"data.tfds: no prepared dataset {name!r} under {data_dir} (looked for {root}/[config/]version/dataset_info.json); harness never downloads")
    return max(candidates, key=lambda p: _version_key(p.parent.name)).parent


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in text.split("."))


# ---------------------------------------------------------------------------------------------
# The scan


def scan_items(items: _Listing | list[Item], spec: DataSpec, multiple: int) -> Scan:
    began = time.perf_counter()
    problems = list(getattr(items, "problems", []))
    size, size_reason = _target_size(items, spec, multiple)
    workers = min(32, 2 * (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda item: _load_item(item, spec, size), items))
    kept, notes = [], Counter()
    for item, result in zip(items, results):
        if isinstance(result, str):
            problems.append(f"{item.name}: {result}")
        else:
            kept.append((item, *result[:2]))
            notes.update(result[2])
    if problems and spec.on_bad_data == "fail":
        raise DataError(
            f"data.source {spec.source}: {len(problems)} bad item(s) of {len(items)} (fix them, or set "
            "data.on_bad_data: skip to leave them out):",
            problems,
        )
    if not kept:
        raise DataError(f"data.source {spec.source}: no usable examples", problems)
    return _assemble(kept, spec, size, size_reason, problems, notes, len(items), time.perf_counter() - began)


def _assemble(kept, spec: DataSpec, size, size_reason: str, problems: list[str], notes: Counter, listed: int, seconds: float) -> Scan:
    is_val = np.array([_is_val(item, spec.val_fraction) for item, _, _ in kept])
    order = np.concatenate([np.flatnonzero(~is_val), np.flatnonzero(is_val)])
    n_val, n_train = int(is_val.sum()), int((~is_val).sum())
    if n_val == 0 or n_train == 0:
        raise DataError(f"data.source {spec.source}: {n_train} training and {n_val} validation examples; both need at least one (data.val_fraction)")
    float_images = any(image.dtype != np.uint8 for _, image, _ in kept)
    images = np.stack([kept[i][1].astype(np.float32) / (255.0 if kept[i][1].dtype == np.uint8 else 1.0) if float_images else kept[i][1] for i in order])
    labels = np.stack([kept[i][2] for i in order])
    train_size = min(n_train, spec.train_size or n_train)
    val_size = min(n_val, spec.val_size or n_val)
    keep = np.r_[0:train_size, n_train : n_train + val_size]
    facts = {
        "source": spec.source,
        "listed": listed,
        "used": int(train_size + val_size),
        "skipped": len(problems),
        "problems": problems[:200],
        "notes": [f"{n} item(s): {what}" for what, n in sorted(notes.items())],
        "image_size": list(size),
        "image_size_reason": size_reason,
        "fit": spec.fit,
        "scan_seconds": round(seconds, 3),
        "scan_items_per_s": round(listed / seconds, 1) if seconds > 0 else None,
        "label_counts": {str(k): int(v) for k, v in zip(*np.unique(labels[keep], return_counts=True))},
    }
    return Scan(images[keep], labels[keep], train_size, val_size, size, facts)


def _is_val(item: Item, fraction: float) -> bool:
    if item.split is not None:
        return item.split == "val"
    digest = hashlib.sha256(Path(item.name).stem.encode() if "[" not in item.name else item.name.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _target_size(items, spec: DataSpec, multiple: int) -> tuple[tuple[int, int], str]:
    if spec.image_size != "auto":
        return tuple(spec.image_size), "data.image_size"
    sizes = [s for s in (_native_size(item.image) for item in items) if s is not None]
    if not sizes:
        raise DataError(f"data.source {spec.source}: no image could be read to choose image_size: auto")
    median = [int(np.median([s[i] for s in sizes])) for i in (0, 1)]
    size = tuple(max(multiple, side // multiple * multiple) for side in median)
    return size, f"auto: median source size {median[0]}x{median[1]} rounded down to a multiple of {multiple} (suits every model)"


def _native_size(source: Any) -> tuple[int, int] | None:
    if isinstance(source, np.ndarray):
        return tuple(source.shape[:2])
    try:
        with _open(source) as image:
            return image.height, image.width
    except Exception:  # reported by the scan itself
        return None


def _open(source: Any):
    from PIL import Image

    return Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)


def _load_item(item: Item, spec: DataSpec, size: tuple[int, int]):
    """(image, labels, notes) fitted to `size`, or the reason the item is bad."""
    try:
        image = _read_image(item.image, spec.channels)
        try:
            mask, notes = _read_labels(item.mask, spec, item.mask_is_jpeg)
        except BadItem as exc:
            raise BadItem(f"mask {item.mask_name}: {exc}" if item.mask_name else f"mask: {exc}") from None
        if image.shape[:2] != mask.shape[:2]:
            raise BadItem(f"image is {image.shape[1]}x{image.shape[0]} but its mask is {mask.shape[1]}x{mask.shape[0]}")
        return _fit(image, size, spec.fit, nearest=False), _fit(mask, size, spec.fit, nearest=True), notes
    except BadItem as exc:
        return str(exc)
    except Exception as exc:  # any decoder failure names the file
        return f"does not decode: {type(exc).__name__}: {exc}"


def _decode(source: Any):
    from PIL import Image

    try:
        image = _open(source)
        image.load()
        return image
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError) as exc:
        raise BadItem(f"does not decode: {exc}") from None


_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def _read_image(source: Any, channels: int) -> np.ndarray:
    if isinstance(source, np.ndarray):
        array = np.asarray(source)
        if array.ndim == 2:
            array = array[..., None]
        if array.ndim != 3:
            raise BadItem(f"image array of shape {array.shape}: expected [H, W] or [H, W, C]")
        if array.shape[-1] == 1 and channels > 1:
            array = np.repeat(array, channels, axis=-1)
        if array.shape[-1] != channels:
            raise BadItem(f"image has {array.shape[-1]} channels, data.channels is {channels}")
        if array.dtype.kind == "f":
            if not np.isfinite(array).all():
                raise BadItem(f"image has {int((~np.isfinite(array)).sum())} NaN/Inf values")
            scale = 255.0 if array.max(initial=0) > 1.0 + 1e-6 else 1.0
            return (array / scale).astype(np.float32)
        return array.astype(np.uint8) if array.max(initial=0) <= 255 else (array / array.max() * 255).astype(np.uint8)
    image = _decode(source)
    if image.mode in ("I;16", "I", "F"):
        raise BadItem(f"image mode {image.mode} (16-bit/float): save 8-bit images, or use the arrays source")
    return np.asarray(image.convert(_MODES[channels]), dtype=np.uint8).reshape(image.height, image.width, channels)


def _read_labels(source: Any, spec: DataSpec, is_jpeg: bool) -> tuple[np.ndarray, list[str]]:
    notes = []
    if isinstance(source, np.ndarray):
        array = np.asarray(source)
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        if array.ndim != 2:
            raise BadItem(f"mask array of shape {array.shape}: expected [H, W] class ids")
        if array.dtype.kind == "f":
            if not np.isfinite(array).all():
                raise BadItem(f"mask has {int((~np.isfinite(array)).sum())} NaN/Inf values")
            if not np.array_equal(array, np.round(array)):
                raise BadItem("mask has non-integer values: expected class ids")
    else:
        image = _decode(source)
        if image.mode == "P":
            array = np.asarray(image)  # palette PNG: the indices are the classes
            notes.append("palette mask: indices used as classes")
        elif image.mode in ("RGB", "RGBA"):
            array = _rgb_labels(np.asarray(image.convert("RGB")), spec.palette)
        else:
            array = np.asarray(image)  # L, I;16, 1 (bool), LA
            if array.ndim == 3:
                array = array[..., 0]
    array = array.astype(np.int64)
    values = np.unique(array)
    if spec.classes == 1 and values.max(initial=0) == 255 and set(values.tolist()) <= {0, 255}:
        array = array // 255
        values = np.unique(array)
        notes.append("binary mask stored as 0/255: mapped to 0/1")
    limit = max(spec.classes, 2)
    stray = values[(values < 0) | (values >= limit)]
    if len(stray):
        count = int(np.isin(array, stray).sum())
        shown = ", ".join(map(str, stray[:8].tolist())) + (" ..." if len(stray) > 8 else "")
        if is_jpeg:
            raise BadItem(f"lossy JPEG mask: {count} pixels with values outside 0..{limit - 1} ({shown}): compression artefacts; save masks as PNG")
        raise BadItem(f"{count} mask pixels with labels outside 0..{limit - 1} ({shown}); data.classes is {spec.classes}")
    return array.astype(np.uint8), notes


def _rgb_labels(rgb: np.ndarray, palette) -> np.ndarray:
    if palette is None:
        if (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all():
            return rgb[..., 0]
        raise BadItem("RGB mask with colours: give data.palette (the colour of each class)")
    codes = rgb.astype(np.int64) @ np.array([65536, 256, 1])
    table = {r * 65536 + g * 256 + b: k for k, (r, g, b) in enumerate(palette)}
    labels = np.full(codes.shape, -1, np.int64)
    for code, klass in table.items():
        labels[codes == code] = klass
    if (labels < 0).any():
        unknown = {tuple(int(c) for c in rgb[i, j]) for i, j in zip(*np.nonzero(labels < 0))}
        raise BadItem(f"{int((labels < 0).sum())} mask pixels with colours not in data.palette: {sorted(unknown)[:5]}")
    return labels


def _fit(array: np.ndarray, size: tuple[int, int], fit: str, nearest: bool) -> np.ndarray:
    """Resize (stretch) or scale-and-centre-crop to `size` (height, width)."""
    from PIL import Image

    height, width = size
    if array.shape[:2] == (height, width):
        return array
    resample = Image.NEAREST if nearest else Image.BILINEAR
    if fit == "crop":
        scale = max(height / array.shape[0], width / array.shape[1])
        inner = (max(height, math.ceil(array.shape[0] * scale)), max(width, math.ceil(array.shape[1] * scale)))
        array = _resize(array, inner, resample)
        top, left = (inner[0] - height) // 2, (inner[1] - width) // 2
        return array[top : top + height, left : left + width]
    return _resize(array, (height, width), resample)


def _resize(array: np.ndarray, size: tuple[int, int], resample) -> np.ndarray:
    from PIL import Image

    if array.ndim == 2:
        return np.asarray(Image.fromarray(array).resize((size[1], size[0]), resample))
    if array.dtype == np.uint8 and array.shape[-1] in (1, 3, 4):
        squeezed = array[..., 0] if array.shape[-1] == 1 else array
        resized = np.asarray(Image.fromarray(squeezed).resize((size[1], size[0]), resample))
        return resized.reshape(size[0], size[1], array.shape[-1])
    channels = [np.asarray(Image.fromarray(array[..., c].astype(np.float32), mode="F").resize((size[1], size[0]), resample)) for c in range(array.shape[-1])]
    return np.stack(channels, axis=-1).astype(array.dtype)


# ---------------------------------------------------------------------------------------------
# Disk cache: decoded arrays, keyed by the files' names, sizes and modification times


def _stamp(spec: DataSpec, items: list[Item], multiple: int) -> str:
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


def _read_cache(folder: Path, stamp: str) -> Scan | None:
    path = folder / f"{stamp}.npz"
    try:
        with np.load(path, allow_pickle=False) as archive:
            facts = json.loads(str(archive["facts"]))
            return Scan(archive["images"], archive["labels"], int(archive["train_size"]), int(archive["val_size"]), tuple(facts["image_size"]), {**facts, "cache": str(path)})
    except (OSError, ValueError, KeyError):
        return None  # absent or damaged: scan again


def _write_cache(folder: Path, stamp: str, scan: Scan) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{stamp}.npz"
    partial = folder / f".{stamp}.{os.getpid()}.npz"
    try:
        np.savez(partial, images=scan.images, labels=scan.labels, train_size=scan.train_size, val_size=scan.val_size, facts=json.dumps(scan.facts))
        os.replace(partial, final)
    except OSError:
        partial.unlink(missing_ok=True)  # a cache is an optimisation: a full disk must not fail the run here
