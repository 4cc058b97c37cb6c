"""Real data sources: each lists its examples as `Item`s (an image and its mask: file paths,
encoded bytes or array slices), with the problems found while listing (missing files, bad
manifest rows). Decoding and checking them is the scan's job (`harness.data.scan`)."""

from __future__ import annotations

import bisect
import csv
import io
import json
import os
import re
import zipfile
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.schema import DataSpec
from harness.errors import ConfigError, DataError


REST = "rest"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif")
JPEG = (".jpg", ".jpeg")


@dataclass(frozen=True)
class Item:
    """One example to scan: `image`/`mask` are paths, encoded bytes or arrays."""

    name: str  # how the user recognises it: "images/cat.png", "train[17]"
    image: Any
    mask: Any
    # "train", "val", "test"; None: decided by val_fraction and test_fraction; REST: not validation
    # (a source with a validation split of its own), so train, or test by test_fraction
    split: str | None = None
    mask_is_jpeg: bool = False
    mask_name: str | None = None  # named in the message when the mask is what is wrong
    image_top: float | None = None  # an array's image: the value read as full brightness (array_top)


class BadItem(Exception):
    """An item that cannot be used, and why."""


# ---------------------------------------------------------------------------------------------
# Listing, per source


def list_items(spec: DataSpec) -> list[Item]:
    listing = {"folder": _folder_items, "csv": _csv_items, "arrays": _array_items, "tfds": _tfds_items}[spec.source]
    items = listing(spec)
    if not items and not getattr(items, "problems", None):
        raise DataError(f"data.source {spec.source}: no examples found in {_where(spec)}{_in_folders_below(spec)}")
    return items


def _in_folders_below(spec: DataSpec) -> str:
    """Images kept in folders below the one given (Cityscapes' one folder per city), which the
    folder source does not read: where they are, and the two ways to use them."""
    if spec.source != "folder" or spec.images is None or not spec.images.is_dir():
        return ""
    below = _Unread(spec.images).per_folder_below
    if not below:
        return ""
    shown = ", ".join(f"{name}/ {count}" for name, count in list(below.items())[:3]) + (f" and {len(below) - 3} more" if len(below) > 3 else "")
    return (f"; the images are in {len(below)} folder(s) below {spec.images} ({shown} images), which are not read: point data.images "
            "and data.masks at one of them, or list every pair in a manifest (data.source: csv, docs/data.md)")


def _listed(folder: Path) -> list[Path]:
    """A folder's entries in name order; none for a folder one may not read (a folder below is only
    looked into for a hint)."""
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _where(spec: DataSpec) -> str:
    """Where a source looked, as the user gave it."""
    if spec.source == "folder":
        folders = [spec.images, spec.masks, spec.val_images, spec.val_masks]
        return ", ".join(str(f) for f in folders if f is not None)
    if spec.source == "csv":
        return str(spec.manifest)
    if spec.source == "arrays":
        return str(spec.arrays or f"{spec.images} and {spec.masks}")
    return f"{spec.tfds.data_dir}/{spec.tfds.name}"


class _Listing(list):
    """Items plus the problems found while listing (missing or duplicate pairs), and notes for the
    scan's facts ({what: how many items})."""

    def __init__(self, items=(), problems=(), notes=None, hints=()):
        super().__init__(items)
        self.problems = list(problems)
        self.notes = dict(notes or {})
        self.hints = list(hints)  # what the problems likely mean together, for the error's headline

    def plus(self, other: "_Listing") -> "_Listing":
        return _Listing([*self, *other], self.problems + other.problems, self.notes | other.notes, self.hints + other.hints)


def _must_exist(path: Path | None, what: str, folder: bool) -> Path:
    if path is None or not (path.is_dir() if folder else path.is_file()):
        kind = "folder" if folder else "file"
        if path is not None and path.exists():
            raise ConfigError(f"data.{what}: {str(path)!r} is a {'file' if folder else 'folder'}, not a {kind}")
        relative = "" if path is None or path.is_absolute() else f" (a relative path is read from the current folder, {Path.cwd()})"
        raise ConfigError(f"data.{what}: {kind} {str(path)!r} does not exist{relative}")
    return path


def _by_stem(folder: Path, what: str, suffix: str = "", others: Counter | None = None) -> tuple[dict[str, Path], list[str], set[str]]:
    """Each file by the stem it is matched on: its own, less `suffix` (data.image_suffix,
    data.mask_suffix). With a suffix, a file whose stem does not end with it is another kind of
    file (Cityscapes keeps `_gtFine_color` and `_gtFine_instanceIds` beside `_gtFine_labelIds`):
    not listed, counted in `others` by the note it gets."""
    found: dict[str, list[Path]] = defaultdict(list)
    broken = []
    for path in sorted(folder.iterdir()):
        # Hidden files are not examples: macOS writes "._name.png" beside each file it copies to a
        # drive of another format (its metadata, not an image), and a shell's `*` leaves them out too.
        if path.suffix.lower() not in IMAGE_EXTENSIONS or path.name.startswith("."):
            continue
        if suffix and not path.stem.endswith(suffix):
            if others is not None:
                others[f"{what} files in {folder} whose names do not end in {suffix!r} (data.{what}_suffix): not read"] += 1
            continue
        if path.is_symlink() and not path.is_file():
            broken.append(f"{path}: a broken symbolic link ({_why_broken(path)})")
        elif path.is_file():
            found[path.stem.removesuffix(suffix)].append(path)
    problems = broken + [
        f"{folder / stem}.*: {len(paths)} {what} files share the stem {stem!r} ({', '.join(p.name for p in paths)}); keep one"
        for stem, paths in found.items()
        if len(paths) > 1
    ]
    doubled = {stem for stem, paths in found.items() if len(paths) > 1}
    return {stem: paths[0] for stem, paths in found.items() if len(paths) == 1}, problems, doubled


def _named_with_suffix(images: dict[str, Path], masks: dict[str, Path]) -> str | None:
    """When the masks are named by their image's stem and a suffix ("ex01_mask.png" for
    "ex01.jpg", as many datasets name them), the setting that says so."""
    suffixes = Counter(m[len(s):] for m in masks for s in (m[:i] for i in range(len(m) - 1, 0, -1)) if s in images)
    if not suffixes:
        return None
    suffix, count = suffixes.most_common(1)[0]
    if count < len(masks) / 2:
        return None
    return f"{count} of {len(masks)} masks are named by an image's stem followed by {suffix!r}: set data.mask_suffix: {suffix!r}"


def _named_with_two_suffixes(images: dict[str, Path], masks: dict[str, Path]) -> str | None:
    """When images and masks share a stem but each adds its own suffix (Cityscapes:
    `<city>_<seq>_<frame>_leftImg8bit.png` and `..._gtFine_labelIds.png`), the two settings. The
    shared stem ends before the separator (_ - . or a space) where the names part."""
    ordered = sorted(masks)
    pairs: Counter = Counter()
    for image in sorted(images)[:200]:  # enough to see the pattern
        at = bisect.bisect_left(ordered, image)
        mask = max(ordered[max(at - 1, 0) : at + 1], key=lambda m: len(os.path.commonprefix([image, m])))
        common = os.path.commonprefix([image, mask])
        cut = max(common.rfind(c) for c in "_-. ")
        if cut > 0 and image[cut:] != mask[cut:]:
            pairs[image[cut:], mask[cut:]] += 1
    if not pairs:
        return None
    (image_suffix, mask_suffix), count = pairs.most_common(1)[0]
    if not image_suffix or count < min(len(images), 200) / 2:
        return None
    return (f"the images' names end in {image_suffix!r} and the masks' in {mask_suffix!r} after a shared stem: "
            f"set data.image_suffix: {image_suffix!r} and data.mask_suffix: {mask_suffix!r}")


class _Unread:
    """Files of a folder the listing passed over, by stem, read once when a partner is missing: it
    is often there in a format harness does not read (a .heic), or in a folder below (folders are
    not searched). One listing per folder, not one glob per missing file."""

    def __init__(self, folder: Path):
        self.other_format: dict[str, str] = {}
        self.below: dict[str, str] = {}
        self.per_folder_below: Counter = Counter()  # images in each folder below, by its name
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.suffix.lower() not in IMAGE_EXTENSIONS:
                self.other_format.setdefault(path.stem, path.name)
            elif path.is_dir():
                for inner in _listed(path):
                    if inner.suffix.lower() in IMAGE_EXTENSIONS:
                        self.below.setdefault(inner.stem, str(inner.relative_to(folder)))
                        self.per_folder_below[path.name] += 1

    def why(self, stem: str) -> str:
        if stem in self.other_format:
            return f" ({self.other_format[stem]} is there, a format harness does not read: {', '.join(IMAGE_EXTENSIONS)})"
        if stem in self.below:
            return f" ({self.below[stem]} is in a folder below it; the folders below are not read)"
        return ""


def _why_broken(link: Path) -> str:
    try:
        link.resolve(strict=True)
    except (RuntimeError, OSError) as exc:  # a loop: RuntimeError (3.11) or OSError ELOOP (3.13)
        if isinstance(exc, FileNotFoundError):
            return f"it points to {os.readlink(link)}, which does not exist"
        return "it loops back on itself"
    return "it cannot be read"


def _folder_pair(images_dir: Path, masks_dir: Path, split: str | None, mask_suffix: str = "", image_suffix: str = "") -> _Listing:
    others: Counter = Counter()
    images, problems, doubled = _by_stem(images_dir, "image", image_suffix, others)
    masks, mask_problems, mask_doubled = _by_stem(masks_dir, "mask", mask_suffix, others)
    if images and masks and not set(images) & set(masks) and (named := _named_with_suffix(images, masks) or _named_with_two_suffixes(images, masks)):
        raise ConfigError(f"data.masks {masks_dir}: no mask has an image's stem; {named}")
    problems += mask_problems
    doubled |= mask_doubled  # already named: not also a missing pair
    no_mask, no_image = sorted(set(images) - set(masks) - doubled), sorted(set(masks) - set(images) - doubled)
    if no_mask:
        unread = _Unread(masks_dir)
        problems += [f"{images[s]}: no mask with the stem {s + mask_suffix!r} in {masks_dir}{unread.why(s + mask_suffix)}" for s in no_mask]
    if no_image:
        unread = _Unread(images_dir)
        problems += [f"{masks[s]}: no image with the stem {s + image_suffix!r} in {images_dir}{unread.why(s + image_suffix)}" for s in no_image]
    items = [
        Item(str(images[s]), images[s], masks[s], split, masks[s].suffix.lower() in JPEG, str(masks[s]))
        for s in sorted((set(images) & set(masks)) - doubled)
    ]
    return _Listing(items, problems, others, _partly_annotated(images_dir, len(no_mask), len(no_image), len(items)))


def _partly_annotated(images_dir: Path, no_mask: int, no_image: int, pairs: int) -> list[str]:
    """Most images without a mask while every mask has its image: a folder of which only some
    images are annotated (Pascal VOC's JPEGImages: 17,125 images, 2,913 masks), not 14,212 faults."""
    if not pairs or no_image or no_mask <= pairs:
        return []
    return [f"{no_mask} images in {images_dir} have no mask and every mask has its image: if only some images are annotated "
            f"(as in Pascal VOC's JPEGImages), data.on_bad_data: skip trains on the {pairs} pairs"]


def _folder_items(spec: DataSpec) -> _Listing:
    suffixes = (spec.mask_suffix, spec.image_suffix)
    listing = _folder_pair(*_existing_pair(spec, ""), None if spec.val_images is None else REST, *suffixes)
    if spec.val_images is not None or spec.val_masks is not None:
        val = _folder_pair(*_existing_pair(spec, "val_"), "val", *suffixes)
        listing = listing.plus(val)
    if spec.test_images is not None:
        test = _folder_pair(*_existing_pair(spec, "test_"), "test", *suffixes)
        listing = listing.plus(test)
    return listing


def _existing_pair(spec: DataSpec, split: str) -> tuple[Path, Path]:
    """A split's image and mask folders (split: "", "val_" or "test_"), each there, and two: in one
    folder every image would be its own mask, each refused as a mask of colours (the wrong fault)."""
    images = _must_exist(getattr(spec, f"{split}images"), f"{split}images", True)
    masks = _must_exist(getattr(spec, f"{split}masks"), f"{split}masks", True)
    if images.resolve() == masks.resolve():
        raise ConfigError(f"data.{split}images and data.{split}masks are the same folder ({images}): the masks are files of their own, "
                          "matched to the images by name, in a folder of their own")
    return images, masks


def _csv_items(spec: DataSpec) -> _Listing:
    manifest = _must_exist(spec.manifest, "manifest", False)
    base = manifest.parent
    raw = manifest.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"data.manifest {manifest}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start}); save the manifest as UTF-8") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    found = reader.fieldnames or []
    reader.fieldnames = [name.strip().lower() for name in found]  # "Image", " mask": the columns meant
    missing = {"image", "mask"} - set(reader.fieldnames)
    if missing:
        raise ConfigError(f"data.manifest {manifest}: needs the columns image and mask (and optionally split), separated by commas; "
                          f"missing: {', '.join(sorted(missing))} (its first line: {','.join(found)!r})")
    rows = list(reader)
    items, problems, seen = [], [], Counter(r["image"] for r in rows)
    for line, row in enumerate(rows, start=2):
        where = f"{manifest}:{line}"
        if not (row.get("image") or "").strip() or not (row.get("mask") or "").strip():
            problems.append(f"{where}: needs an image path and a mask path, got {','.join(v for v in row.values() if isinstance(v, str))!r}")
            continue
        image, mask = base / row["image"], base / row["mask"]
        split = (row.get("split") or "").strip().lower() or None
        if seen[row["image"]] > 1:
            problems.append(f"{where}: {row['image']} is listed {seen[row['image']]} times")
            continue
        if split not in (None, "train", "val", "test"):
            problems.append(f"{where}: split must be train, val or test, got {row['split']!r}")
            continue
        absent = [str(p) for p in (image, mask) if not p.is_file()]
        if absent:
            problems.append(f"{where}: file does not exist: {', '.join(absent)}")
            continue
        items.append(Item(str(image), image, mask, split, mask.suffix.lower() in JPEG, str(mask)))
    items, given = _shares_of_train_rows(items, spec.test_fraction)
    return _Listing(items, problems, _unmarked_note(items) | given)


def _shares_of_train_rows(items: list[Item], test_fraction: float) -> tuple[list[Item], dict[str, int]]:
    """A manifest that marks every row has no rows for `val_fraction` or `test_fraction` to take
    from. With no row marked val (official train and test splits), validation's share comes from
    the rows marked train; with no row marked test (Cityscapes' train and val: its test masks are
    not public) and a `test_fraction`, test's share does, never validation's, as beside a
    validation folder. A note says which."""
    trained = sum(item.split == "train" for item in items)
    if not trained or any(item.split is None for item in items):
        return items, {}
    marked = {item.split for item in items}
    if "val" not in marked:
        also = " (and data.test_fraction its share for the test split)" if test_fraction > 0 and "test" not in marked else ""
        note = f"manifest rows marked train, of which data.val_fraction took its share for validation{also} (no row is marked val)"
        return [replace(item, split=None) if item.split == "train" else item for item in items], {note: trained}
    if test_fraction > 0 and "test" not in marked:
        note = "manifest rows marked train, of which data.test_fraction took its share for the test split (no row is marked test)"
        return [replace(item, split=REST) if item.split == "train" else item for item in items], {note: trained}
    return items, {}


def _unmarked_note(items: list[Item]) -> dict[str, int]:
    """Rows without a split beside rows marked val: they are divided by data.val_fraction like any
    file without a given split, which a manifest that marks its validation rows may not mean."""
    unmarked = sum(item.split is None for item in items)
    if not unmarked or not any(item.split == "val" for item in items):
        return {}
    return {"manifest rows without a split, divided by data.val_fraction (and data.test_fraction) beside the rows "
            "marked val; mark them train to train on all of them": unmarked}


def _array_items(spec: DataSpec) -> _Listing:
    if spec.arrays is not None:
        path = _must_exist(spec.arrays, "arrays", False)
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # a cut or damaged archive
            raise DataError(f"data.arrays {path}: cannot be read as .npz: {exc}") from None
        names = {"images": _first(arrays, "images", "x", "image"), "masks": _first(arrays, "masks", "y", "mask")}
        if names["images"] is None or names["masks"] is None:
            raise DataError(f"data.arrays {path}: needs arrays named images and masks (or x and y); it has {', '.join(arrays) or 'none'}")
        parts = [(REST if "val_images" in arrays else None, arrays[names["images"]], arrays[names["masks"]], path.name)]
        if "val_images" in arrays and "val_masks" in arrays:
            parts.append(("val", arrays["val_images"], arrays["val_masks"], f"{path.name}:val"))
        if "test_images" in arrays and "test_masks" in arrays:
            parts.append(("test", arrays["test_images"], arrays["test_masks"], f"{path.name}:test"))
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
    tops = {}  # one full brightness for all the image arrays of a kind (float, integer) in the source
    for _, images, _, _ in parts:
        kind = _kind(images)
        tops[kind] = max(tops.get(kind, 0.0), array_top(images))
    for split, images, masks, label in parts:
        if len(images) != len(masks):
            problems.append(f"{label}: {len(images)} images but {len(masks)} masks")
            continue
        items += [Item(f"{label}[{i}]", images[i], masks[i], split, image_top=tops[_kind(images)]) for i in range(len(images))]
    return _Listing(items, problems)


def array_top(images) -> float:
    """The value an array's images are read as full brightness at, decided over the whole array
    (and over all the arrays of a source: `_array_items`):
    float images are 0..1 (1) or, when the array's largest finite value is 2 or more, 0..255 (255);
    integer images are 0..255, or 0..their largest value when that is above 255 (12- or 16-bit
    data). Decided image by image, a dark picture of a 0..255 array was read as 0..1, a picture a
    resize left at 1.02 as 0..255 (nearly black), and each 16-bit picture was stretched to its own
    brightest pixel."""
    largest = -np.inf
    for start in range(0, len(images), 64):  # a memory-mapped array is read a slice at a time
        chunk = np.asarray(images[start : start + 64])
        if chunk.dtype.kind == "f":
            chunk = chunk[np.isfinite(chunk)]  # NaN/Inf are each image's own problem (scan)
        if chunk.size:
            largest = max(largest, float(chunk.max()))
    if _kind(images) == "f":
        return 255.0 if largest >= 2.0 else 1.0
    return max(255.0, largest)


def _kind(images) -> str:
    return "f" if np.asarray(images[:0]).dtype.kind == "f" else "i"


def _first(arrays: dict, *names: str) -> str | None:
    return next((n for n in names if n in arrays), None)


def _tfds_items(spec: DataSpec) -> _Listing:
    """Read a prepared TFDS dataset straight from its files (dataset_info.json + TFRecord shards
    of tf.train.Example with encoded images), so tensorflow-datasets itself is not needed."""
    from harness.core.backend import import_tf

    tf = import_tf()
    tfds = spec.tfds
    folder = _tfds_folder(tfds.data_dir, tfds.name)
    try:
        info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"data.tfds: {folder / 'dataset_info.json'} cannot be read: {exc}; prepare the dataset again") from None
    dataset = info.get("name") or tfds.name.split("/")[0]
    splits = [(tfds.train_split, REST if tfds.val_split else None)] + ([(tfds.val_split, "val")] if tfds.val_split else [])
    splits += [(tfds.test_split, "test")] if tfds.test_split else []
    items, problems = [], []
    features = {k: tf.io.FixedLenFeature([], tf.string) for k in (tfds.image_key, tfds.mask_key)}
    for split_name, split in splits:
        shards = sorted(folder.glob(f"{dataset}-{split_name}.tfrecord*"))
        if not shards:
            known = sorted({p.name.split("-")[1].split(".")[0] for p in folder.glob(f"{dataset}-*.tfrecord*")})
            raise ConfigError(f"data.tfds: no split {split_name!r} in {folder} (splits on disk: {', '.join(known) or 'none'})")
        for count, record in enumerate(record for shard in shards for record in _records(tf, shard, problems)):
            name = f"{dataset}/{split_name}[{count}]"
            try:
                example = tf.io.parse_single_example(record, features)
            except tf.errors.InvalidArgumentError as exc:
                problems.append(f"{name}: not an example with {tfds.image_key!r} and {tfds.mask_key!r}: {exc.message.splitlines()[0]}")
                continue
            mask = example[tfds.mask_key].numpy()
            items.append(Item(name, example[tfds.image_key].numpy(), mask, split, mask[:3] == b"\xff\xd8\xff"))
    return _Listing(items, problems)


def _records(tf, shard: Path, problems: list[str]):
    """A TFRecord shard's records; one truncated or corrupt is named in `problems` and the records
    before the damage are kept (it stopped the scan as an internal error)."""
    records, read = iter(tf.data.TFRecordDataset(str(shard))), 0
    while True:
        try:
            yield next(records)
        except StopIteration:
            return
        except tf.errors.OpError as exc:
            problems.append(f"{shard}: cannot be read past its first {read} record(s) ({type(exc).__name__}: the file is "
                            "truncated or corrupt); prepare the dataset again")
            return
        read += 1


def _tfds_folder(data_dir: Path, name: str) -> Path:
    """data_dir/name[/config]/version: the given version, or the newest one on disk."""
    root = _must_exist(data_dir, "tfds.data_dir", True) / name
    candidates = sorted(root.glob("dataset_info.json")) + sorted(root.glob("*/dataset_info.json")) + sorted(root.glob("*/*/dataset_info.json"))
    # A version folder is named by its version alone: "4.0.0.incomplete6Q1NXF" is one TFDS is still
    # writing (or was stopped writing), and sorted as the newest it would be read half-written.
    candidates = [p for p in candidates if p.parent == root or re.fullmatch(r"\d+(\.\d+)*", p.parent.name)]
    if not candidates:
        raise ConfigError(f"data.tfds: no prepared dataset {name!r} under {data_dir} (looked for {root}/[config/]version/dataset_info.json); harness never downloads")
    return max(candidates, key=lambda p: _version_key(p.parent.name)).parent


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in text.split("."))


