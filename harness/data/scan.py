"""The pre-flight scan: every listed example decoded and checked before anything is built.

The scan decodes every item in parallel threads (Pillow releases the GIL while decoding),
checks it, converts the mask to class labels and fits both to `image_size`; every bad item is
named with its reason. Then `harness.data.resolve` fills the sizes the scan found into the config,
and `harness.data.pipeline` builds the input pipeline from the loaded arrays.

Masks: palette PNGs give their indices; grayscale masks give their values; RGB masks are mapped
through `data.palette` (or read as grayscale when all three channels agree). Binary masks stored
as 0/255 are mapped to 0/1 (with a note); labels outside 0..classes-1 are an error, which for a
JPEG mask is named as what it almost always is: compression artefacts.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.config.catalog import smallest_side
from harness.config.data_spec import IGNORED_LABEL
from harness.config.schema import DataSpec
from harness.core.host import memory_bytes
from harness.errors import DataError, ResourceError

from harness.data.duplicates import across_splits, image_digest
from harness.data.sources import BadItem, Item
from harness.data.splits import SPLITS, check_split_counts, split_of, used_sizes


@dataclass
class Scan:
    """The scanned, loaded data: train examples first, then validation ones, then test ones."""

    images: np.ndarray | None  # [N, H, W, C] uint8 or float32 in [0, 1]; None when streamed from disk
    labels: np.ndarray | None  # [N, H, W] uint8 class ids
    train_size: int
    val_size: int
    image_size: tuple[int, int]
    facts: dict[str, Any] = field(default_factory=dict)  # for run.json
    test_size: int = 0  # held-out test examples, after the validation ones
    variables: Any = field(default=None, repr=False)  # the arrays as CPU tf.Variables (harness.data.pipeline)
    store: Any = field(default=None, repr=False)  # data.cache: disk: the examples on disk (images and labels None)
    fingerprints: dict[str, str] = field(default_factory=dict, repr=False)  # item -> content fingerprint (data/fingerprint.py)
    splits: dict[str, str] = field(default_factory=dict, repr=False)  # item -> its split (split_of): a resume checks none moved


# ---------------------------------------------------------------------------------------------
# The scan


def scan_items(items: list[Item], spec: DataSpec, multiple: int, least: int = 1) -> Scan:
    began = time.perf_counter()
    problems = list(getattr(items, "problems", []))
    size, size_reason = _target_size(items, spec, multiple, least)
    held = held_in_memory(items, spec, size, size_reason)
    workers = min(32, 2 * (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda item: _load_item(item, spec, size), items))
    kept, notes = [], Counter(getattr(items, "notes", {}))
    for item, result in zip(items, results):
        if isinstance(result, str):
            problems.append(f"{item.name}: {result}")
        else:
            kept.append((item, *result[:2]))
            notes.update(result[2])
    del results  # `kept` holds the decoded arrays alone: _stacked lets each go as it copies it
    if problems and spec.on_bad_data == "fail":
        raise bad_data_error(spec, problems, items)
    if not kept:
        raise DataError(f"data.source {spec.source}: no usable examples", problems)
    scan = _assemble(kept, spec, size, size_reason, problems, notes, listed_count(items), time.perf_counter() - began)
    scan.facts["memory"] = held
    return scan


# The in-memory scan holds each decoded example, then one array of them all, and the input
# pipeline copies that array into TensorFlow's own: about twice the decoded size (measured: 1,000
# examples at 256x256 RGB, 250 MB decoded, raised the scanning process's resident memory by 523 MB
# beyond the memory-mapped source's pages; then the array and TensorFlow's copy, 500 MB).
HELD_COPIES = 2


def memory_warning(held: dict[str, Any] | None) -> str | None:
    """Said before training when the held data take more than half of the available memory: the
    models, their optimizers and TensorFlow need the rest."""
    if not held or not held.get("available_bytes") or held["bytes"] <= held["available_bytes"] / 2:
        return None
    return (f"the data held in memory take about {held['bytes'] / 2**30:.1f} GiB of the {held['available_bytes'] / 2**30:.1f} GiB "
            "available, leaving little for the models: data.cache: disk streams them from disk")


def held_in_memory(items: list[Item], spec: DataSpec, size: tuple[int, int], size_reason: str) -> dict[str, Any]:
    """What holding the decoded examples in memory will take, refused (exit 4) before decoding when
    it exceeds the memory the kernel says is available: the scan would otherwise be killed by the
    kernel, or swap, with no word. {"bytes": ..., "available_bytes": ...} for the facts."""
    per_example = size[0] * size[1] * (spec.channels * (4 if has_float_images(items) else 1) + 1)  # the image, then one byte a label
    needed = HELD_COPIES * per_example * len(items)
    memory = memory_bytes()
    available = memory[1] if memory else None
    if available is not None and needed > available:
        raise ResourceError(
            f"data: {len(items)} examples at {size[0]}x{size[1]} ({size_reason}) take about {needed / 2**30:.1f} GiB held in "
            f"memory ({HELD_COPIES} copies of {per_example / 2**20:.2f} MiB each), more than the {available / 2**30:.1f} GiB this "
            "machine has available: set data.cache: disk to stream them from disk, or a smaller data.image_size"
        )
    return {"bytes": needed, "available_bytes": available}


def has_float_images(items: list[Item]) -> bool:
    """Whether any image is a float array (an arrays source): then every image is held as float32."""
    return any(isinstance(item.image, np.ndarray) and item.image.dtype.kind == "f" for item in items)


def listed_count(items: list[Item]) -> int:
    """The examples a source listed: the items, and the pairs its listing already refused."""
    return len(items) + len(getattr(items, "problems", []))


def bad_data_error(spec: DataSpec, problems: list[str], items: list[Item]) -> DataError:
    hints = "".join(f"; {hint}" for hint in getattr(items, "hints", []))  # what the problems mean together
    return DataError(
        f"data.source {spec.source}: {len(problems)} bad item(s) of {listed_count(items)} (fix them, or set "
        f"data.on_bad_data: skip to leave them out){hints}:",
        problems,
    )


def _assemble(kept, spec: DataSpec, size, size_reason: str, problems: list[str], notes: Counter, listed: int, seconds: float) -> Scan:
    splits = np.array([split_of(item, spec.val_fraction, spec.test_fraction) for item, _, _ in kept])
    counts = {name: int((splits == name).sum()) for name in SPLITS}
    check_split_counts(spec, counts)
    sizes = used_sizes(spec, counts)
    # The used examples of each split, in split order: the first `sizes[name]` a size cap keeps.
    chosen = np.concatenate([np.flatnonzero(splits == name)[: sizes[name]] for name in SPLITS])
    names = [kept[i][0].name for i in chosen]
    images, labels = _stacked(kept, chosen)
    label_counts = {str(k): int(v) for k, v in zip(*np.unique(labels, return_counts=True))}
    facts = scan_facts(spec, listed, len(chosen), problems, notes, size, size_reason, seconds, label_counts)
    starts = {"train": 0, "val": sizes["train"], "test": sizes["train"] + sizes["val"]}
    facts["duplicates"] = across_splits({name: [(names[i], image_digest(images[i])) for i in range(starts[name], starts[name] + sizes[name])] for name in SPLITS})
    return Scan(images, labels, sizes["train"], sizes["val"], size, facts, test_size=sizes["test"])


def _stacked(kept: list, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chosen examples' images and labels as two arrays, each example's own arrays let go as it
    is copied. The scan's peak was three decoded datasets (the decoded list, a stack of it, and a
    second copy cut to the used examples); measured now at two (the allocator keeps some of what is
    let go). Images are float32 in 0..1 when any is a float (an arrays source), else uint8."""
    float_images = any(image.dtype != np.uint8 for _, image, _ in kept)
    first_image, first_labels = kept[chosen[0]][1], kept[chosen[0]][2]
    images = np.empty((len(chosen), *first_image.shape), np.float32 if float_images else np.uint8)
    labels = np.empty((len(chosen), *first_labels.shape), first_labels.dtype)
    for row, i in enumerate(chosen):
        _, image, label = kept[i]
        images[row] = image.astype(np.float32) / 255.0 if float_images and image.dtype == np.uint8 else image
        labels[row] = label
        kept[i] = None  # this example's decoded arrays are in the stack now
    return images, labels


def scan_facts(spec: DataSpec, listed: int, used: int, problems: list[str], notes, size, size_reason: str, seconds: float, label_counts: dict) -> dict[str, Any]:
    """What run.json says about a scan (held in memory or written to the on-disk store)."""
    return {
        "source": spec.source,
        "listed": listed,
        "used": int(used),
        "skipped": len(problems),
        "problems": problems[:200],
        "notes": [f"{n} item(s): {what}" for what, n in sorted(notes.items())],
        "image_size": list(size),
        "image_size_reason": size_reason,
        "fit": spec.fit,
        "scan_seconds": round(seconds, 3),
        "scan_items_per_s": round(listed / seconds, 1) if seconds > 0 else None,
        "label_counts": label_counts,
    }


def _target_size(items, spec: DataSpec, multiple: int, least: int = 1) -> tuple[tuple[int, int], str]:
    """`image_size: auto`: the median source size rounded down to `multiple`, but no side under
    `least` (a backbone's smallest input, rounded up to `multiple`)."""
    if spec.image_size != "auto":
        return tuple(spec.image_size), "data.image_size" + _scaled_by(items, spec)
    median, _ = _median_size(items, spec)
    if median is None:
        raise DataError(f"data.source {spec.source}: no image could be read to choose image_size: auto")
    smallest = smallest_side(multiple, least)
    size = tuple(max(smallest, side // multiple * multiple) for side in median)
    reason = f"auto: median source size {median[0]}x{median[1]} rounded down to a multiple of {multiple}"
    if smallest > multiple and min(median) < smallest:
        return size, f"{reason}, and raised to {smallest}: the least side every model builds with"
    return size, f"{reason} (suits every model)"


SIZE_SAMPLE = 64  # images whose header is read to tell a fixed image_size from the sources' own


def _scaled_by(items, spec: DataSpec) -> str:
    """`; the source images are 32x32 (median of 40): enlarged 3x ...` where a fixed image_size is
    2x or more off the sources' own size either way (a run on 32x32 images at the default 96x96
    computes 9x the pixels of their own), else nothing. Reads the headers of up to SIZE_SAMPLE
    images spread over the list."""
    median, read = _median_size(items[:: max(1, len(items) // SIZE_SAMPLE)][:SIZE_SAMPLE], spec)
    if median is None:
        return ""
    ratios = [target / max(side, 1) for target, side in zip(spec.image_size, median)]
    low, high = min(ratios), max(ratios)
    if 0.5 < low and high < 2:
        return ""
    how = f"enlarged {high:.3g}x" if low >= 1 else f"shrunk {1 / low:.3g}x" if high <= 1 else "stretched"
    return f"; the source images are {median[0]}x{median[1]} (median of {read}): {how}; image_size: auto keeps about their own size"


def _median_size(items, spec: DataSpec) -> tuple[list[int] | None, int]:
    """([height, width] median over the items' images as read, how many could be read); None
    when none could."""
    sizes = [s for s in (_native_size(item.image, spec.exif_orientation == "apply") for item in items) if s is not None]
    return ([int(np.median([s[i] for s in sizes])) for i in (0, 1)] if sizes else None), len(sizes)


def _native_size(source: Any, turn: bool = False) -> tuple[int, int] | None:
    """(height, width) as read: with `turn` (data.exif_orientation: apply), as a viewer shows it."""
    if isinstance(source, np.ndarray):
        return tuple(source.shape[:2])
    try:
        with _open(source) as image:
            sideways = turn and _orientation(image) in _QUARTER_TURNS
            return (image.width, image.height) if sideways else (image.height, image.width)
    except Exception:  # reported by the scan itself
        return None


def _open(source: Any):
    from PIL import Image

    return Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)


def _load_item(item: Item, spec: DataSpec, size: tuple[int, int]):
    """(image, labels, notes) fitted to `size`, or the reason the item is bad."""
    try:
        turn = spec.exif_orientation == "apply"
        image, turned = _read_image(item.image, spec.channels, item.image_top, turn)
        try:
            mask, notes = _read_labels(item.mask, spec, item.mask_is_jpeg, turn)
        except BadItem as exc:
            raise BadItem(f"mask {item.mask_name}: {exc}" if item.mask_name else f"mask: {exc}") from None
        if image.shape[:2] != mask.shape[:2]:
            sideways = turned and image.shape[:2] == mask.shape[1::-1]
            raise BadItem(f"image is {image.shape[1]}x{image.shape[0]} but its mask is {mask.shape[1]}x{mask.shape[0]}" + (f"; {EXIF_NOTE}" if sideways else ""))
        notes += [EXIF_APPLIED if turn else EXIF_NOTE] if turned else []
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


# A camera's EXIF orientation tag says how a viewer should turn the picture; its pixels are stored
# unturned, and harness reads them so, as TensorFlow's and Keras's decoders do. A mask drawn in a
# tool that turns the picture first (most annotation tools) is then turned against its image.
EXIF_NOTE = (
    "the image has an EXIF orientation tag (a camera's rotation), which harness does not apply: its pixels are read "
    "as stored; if the masks were drawn on the turned picture, set data.exif_orientation: apply"
)
EXIF_APPLIED = "the image's EXIF orientation tag was applied (data.exif_orientation: apply): its pixels turned as a viewer shows them"
_EXIF_ORIENTATION = 0x0112
_QUARTER_TURNS = (5, 6, 7, 8)  # the orientations that swap width and height


def _read_image(source: Any, channels: int, top: float | None = None, turn: bool = False) -> tuple[np.ndarray, bool]:
    """The image's pixels (with `turn`, turned as its EXIF orientation tag says), and whether it has
    a tag that would have a viewer turn them."""
    if isinstance(source, np.ndarray):
        return _array_image(np.asarray(source), channels, top or (1.0 if source.dtype.kind == "f" else 255.0)), False
    image = _decode(source)
    turned = _orientation(image) not in (0, 1)
    image = _upright(image) if turn and turned else image
    if image.mode in ("I;16", "I", "F"):
        raise BadItem(f"image mode {image.mode} (16-bit/float): save 8-bit images, or use the arrays source")
    return np.asarray(image.convert(_MODES[channels]), dtype=np.uint8).reshape(image.height, image.width, channels), turned


def _orientation(image) -> int:
    """The picture's EXIF orientation tag: 1 (or 0) as stored, 2-8 a mirror or turn to display it."""
    return image.getexif().get(_EXIF_ORIENTATION, 1)


def _upright(image):
    """The picture turned as its EXIF orientation tag says, as a viewer shows it (unchanged without a tag)."""
    from PIL import ImageOps

    return ImageOps.exif_transpose(image)


def _array_image(array: np.ndarray, channels: int, top: float) -> np.ndarray:
    """One image of an arrays source, as float32 in 0..1 or uint8; `top` is the array's full
    brightness (sources.array_top)."""
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
        low, high = float(array.min(initial=0)), float(array.max(initial=0))
        if low < -1e-6 or high > top * (1 + 1e-6):
            raise BadItem(
                f"image values range {low:.4g}..{high:.4g}, outside 0..{top:g}: float images are read as 0..1, or as "
                "0..255 when the array's largest value is 2 or more; clip them to that range, or rescale them "
                "(standardised images: (x - x.min()) / (x.max() - x.min()))"
            )
        return (array / top).astype(np.float32)
    low, high = int(array.min(initial=0)), int(array.max(initial=0))
    if low < 0:
        raise BadItem(
            f"image values range {low}..{high}: integer images must not be negative (they would wrap "
            "around as 8-bit); scale them to 0..255, or to floats in 0..1"
        )
    return array.astype(np.uint8) if top <= 255 else (array / top * 255).astype(np.uint8)


def _read_labels(source: Any, spec: DataSpec, is_jpeg: bool, turn: bool = False) -> tuple[np.ndarray, list[str]]:
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
        image = _upright(_decode(source)) if turn else _decode(source)
        if spec.mask_threshold is not None:  # binary by a threshold of its grey levels
            above = np.asarray(image.convert("L")) > spec.mask_threshold
            notes.append(f"binary mask thresholded: values above {spec.mask_threshold} as foreground (data.mask_threshold)")
            return above.astype(np.uint8), notes
        if image.mode == "P":
            array = np.asarray(image)  # palette PNG: the indices are the classes
            notes.append("palette mask: indices used as classes")
        elif image.mode in ("RGB", "RGBA"):
            array = _rgb_labels(np.asarray(image.convert("RGB")), spec.palette)
        else:
            array = np.asarray(image)  # L, I;16, 1 (bool), LA
            if array.ndim == 3:
                array = array[..., 0]
    return _class_ids(array.astype(np.int64), spec, is_jpeg, notes), notes


def _class_ids(array: np.ndarray, spec: DataSpec, is_jpeg: bool, notes: list[str]) -> np.ndarray:
    """A mask's values as class ids (uint8): `label_map` applied, a 0/255 binary mask mapped to
    0/1, every id checked below `classes`; pixels of `ignore_label` stored as IGNORED_LABEL."""
    if spec.label_map:
        array = _mapped(array, spec.label_map)
    ignored = array == spec.ignore_label if spec.ignore_label is not None else np.zeros(array.shape, bool)
    values = np.unique(array[~ignored])
    if spec.classes == 1 and values.max(initial=0) == 255 and set(values.tolist()) <= {0, 255}:
        array = np.where(ignored, array, array // 255)
        values = np.unique(array[~ignored])
        notes.append("binary mask stored as 0/255: mapped to 0/1")
    limit = max(spec.classes, 2)
    stray = values[(values < 0) | (values >= limit)]
    if len(stray):
        count = int((np.isin(array, stray) & ~ignored).sum())
        shown = ", ".join(map(str, stray[:8].tolist())) + (" ..." if len(stray) > 8 else "")
        if is_jpeg:
            way = "; or, binary masks, data.mask_threshold: 127" if spec.classes == 1 else ""
            raise BadItem(f"lossy JPEG mask: {count} pixels with values outside 0..{limit - 1} ({shown}): compression artefacts; save masks as PNG{way}")
        mapped = " after data.label_map" if spec.label_map else ""
        if spec.classes == 1 and values.max() == 255 and len(stray) > 2:
            way = ("grey levels between 0 and 255: edges smoothed when the mask was drawn or resized; save binary masks "
                   "with nearest-neighbour resizing, or threshold them: data.mask_threshold: 127")
        else:
            way = "data.label_map folds a mask's values into classes, data.ignore_label leaves one out: 255 for a void border"
        raise BadItem(f"{count} mask pixels with labels outside 0..{limit - 1}{mapped} ({shown}); data.classes is {spec.classes} ({way})")
    return np.where(ignored, IGNORED_LABEL, array).astype(np.uint8)


def _mapped(array: np.ndarray, label_map: dict[int, int]) -> np.ndarray:
    """data.label_map applied: each value it names becomes its class, the others stay."""
    mapped = array.copy()
    for value, klass in label_map.items():
        mapped[array == value] = klass
    return mapped


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


