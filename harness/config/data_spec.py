"""The data section of an experiment: where examples come from, how they are split (train,
validation, a held-out test split), sized, augmented and cached. Part of the schema
(`harness.config.schema`), which re-exports these classes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from harness.config.recipes import ACCEPTED, Strict


class AugmentSpec(Strict):
    """Training-time augmentation, native TensorFlow ops with stateless seeds drawn from
    (seed, step, position in the batch): every model sees the same augmented batch, a run is
    repeatable, and a resumed run sees the batches it would have seen."""

    flip_left_right: bool = False
    flip_up_down: bool = False
    rotate90: bool = False  # a random multiple of 90 degrees (square images only)
    # random crop of this fraction range of each side, resized back (e.g. [0.6, 1.0]); None: off
    crop_scale: tuple[Annotated[float, Field(gt=0, le=1)], Annotated[float, Field(gt=0, le=1)]] | None = None
    brightness: Annotated[float, Field(ge=0, le=1)] = 0.0  # max shift, images are in [0, 1]
    contrast: Annotated[float, Field(ge=0, lt=1)] = 0.0  # contrast factor in [1 - c, 1 + c]

    @model_validator(mode="after")
    def _ordered(self) -> "AugmentSpec":
        if self.crop_scale is not None and self.crop_scale[0] > self.crop_scale[1]:
            raise ValueError(f"crop_scale: [low, high] with low <= high, got {list(self.crop_scale)}")
        return self

    @property
    def active(self) -> bool:
        return any((self.flip_left_right, self.flip_up_down, self.rotate90, self.crop_scale, self.brightness, self.contrast))


class TfdsSpec(Strict):
    """A TensorFlow Datasets dataset already prepared on disk; nothing is ever downloaded."""

    name: str  # e.g. "oxford_iiit_pet" or "oxford_iiit_pet/4.0.0" (default: the newest on disk)
    data_dir: Path
    train_split: str = "train"
    val_split: str | None = "test"  # None: a val_fraction of the train split
    test_split: str | None = None  # a held-out test split (e.g. "test", with val_split: null or another split)
    image_key: str = "image"
    mask_key: str = "segmentation_mask"

    @model_validator(mode="after")
    def _distinct_splits(self) -> "TfdsSpec":
        if self.test_split is not None and self.test_split in (self.train_split, self.val_split):
            raise ValueError(f"test_split {self.test_split!r} is also the train or val split: the test split must be held out (set val_split: null to take validation from the train split)")
        return self


SOURCES = ("synthetic", "folder", "csv", "arrays", "tfds")
# How a pixel of `data.ignore_label` is stored once scanned (labels are uint8 class ids): a value no
# class takes. The pipeline encodes it as no class (binary: -1; one-hot: all zeros), and the losses
# and counts leave such pixels out.
IGNORED_LABEL = 255
SOURCE_FIELDS = {"folder": ("images", "masks"), "csv": ("manifest",), "arrays": ("arrays",), "tfds": ("tfds",)}
REAL_SOURCES = ("folder", "csv", "arrays", "tfds")
# The settings that say where the data's files are (not what they hold): read from the current folder when relative.
FILE_PATHS = ("images", "masks", "val_images", "val_masks", "test_images", "test_masks", "manifest", "arrays")
# Settings only some sources read. Given (anything but its default) under another source, one
# would be ignored without a word: a test_fraction under synthetic would leave the run with no
# test split at all, and its ranking on the validation images it chose with.
READ_ONLY_BY = {
    "max_shapes": ("synthetic",),
    "images": ("folder", "arrays"), "masks": ("folder", "arrays"), "mask_suffix": ("folder",), "image_suffix": ("folder",),
    "val_images": ("folder",), "val_masks": ("folder",), "test_images": ("folder",), "test_masks": ("folder",),
    "manifest": ("csv",), "arrays": ("arrays",), "tfds": ("tfds",), **{name: ("folder", "csv", "tfds") for name in ("exif_orientation", "mask_threshold")},
    **{name: REAL_SOURCES for name in ("val_fraction", "test_fraction", "on_bad_data", "palette", "label_map", "ignore_label", "fit", "cache")},
}
INSTEAD = {"synthetic": {"val_fraction": "data.val_size", "test_fraction": "data.test_size"}}
Side = Annotated[int, Field(ge=8, le=4096)]


class DataSpec(Strict):
    # synthetic: generated shapes. folder: images/ and masks/ matched by file stem. csv: a
    # manifest of image,mask[,split] paths. arrays: one .npz (images, masks[, val_images,
    # val_masks]) or images/masks .npy files. tfds: a TFDS dataset on disk.
    source: Literal[SOURCES] = "synthetic"  # type: ignore[valid-type]
    # The data's own seed: the synthetic images and masks. Apart from the top-level (training)
    # seed, so changing `seed:` or adding repeats varies training, never the images compared on.
    seed: Annotated[int, Field(ge=0, lt=2**31)] = 0
    images: Path | None = None
    masks: Path | None = None
    # folder source: a mask's name is its image's stem followed by this ("_mask": ex01_mask.png
    # is the mask of ex01.jpg); by default the same stem
    mask_suffix: str = ""
    # folder source: an image's stem less this is what its mask is named by (Cityscapes: image
    # aachen_000000_000019_leftImg8bit.png, mask aachen_000000_000019_gtFine_labelIds.png are
    # image_suffix "_leftImg8bit" and mask_suffix "_gtFine_labelIds"); by default the whole stem
    image_suffix: str = ""
    val_images: Path | None = None  # folder source: a separate validation folder pair
    val_masks: Path | None = None
    test_images: Path | None = None  # folder source: a separate test folder pair
    test_masks: Path | None = None
    manifest: Path | None = None
    arrays: Path | None = None
    tfds: TfdsSpec | None = None
    # Real sources without a given split: this share, chosen by a hash of each file's stem, so
    # adding files never moves existing ones between train and val.
    val_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    # A held-out test split, never trained on and never chosen with: this share of the files
    # without a given split, chosen by a second hash of the stem (so val and train keep theirs).
    test_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.0
    on_bad_data: Literal["fail", "skip"] = "fail"  # skip: leave bad files out, and count them
    palette: list[tuple[int, int, int]] | None = None  # RGB masks: the colour of class 0, 1, ...
    # A mask value -> the class it is (values not named stay as they are): a void border (255 in
    # Pascal VOC) folded into a class, or oxford_iiit_pet's trimap {1: pet, 2: background, 3: border}
    # as {1: 1, 2: 0, 3: 1}. Applied after `palette` and before the check that ids are below `classes`.
    label_map: dict[Annotated[int, Field(ge=0, le=65535)], Annotated[int, Field(ge=0, le=255)]] | None = None
    # A mask value marking pixels that are no class (VOC's and Cityscapes' 255: a void border, an
    # unlabelled region): left out of the loss and of every score. Applied after `label_map`.
    ignore_label: Annotated[int, Field(ge=0, le=65535)] | None = None
    # Binary masks (classes 1) stored with grey levels (lossy JPEG: Kvasir-SEG's; edges smoothed by
    # a drawing tool or a resize): a pixel above this value is foreground, the rest background. The
    # mask is read as grey (an RGB mask's channels averaged) before the threshold.
    mask_threshold: Annotated[int, Field(ge=0, le=254)] | None = None
    # An image file's EXIF orientation tag (a phone's rotation): "ignore" reads its pixels as stored,
    # as TensorFlow's decoders do; "apply" turns them as a viewer shows them (and as most annotation
    # tools did when the masks were drawn). Masks are read the same way.
    exif_orientation: Literal["ignore", "apply"] = "ignore"
    fit: Literal["resize", "crop"] = "resize"  # to image_size: stretch, or scale + centre crop
    cache: Literal["memory", "disk"] = "memory"  # disk: decoded arrays kept beside the runs
    augment: AugmentSpec = AugmentSpec()
    # Each training seed trains on its own bootstrap sample of the training split (as many draws,
    # with replacement, as it has examples), so that repeats vary the data sampled as well as the
    # weights, order and augmentation (Bouthillier et al. 2021). Validation and test stay as they are.
    bootstrap_train: bool = False
    # "auto" (real sources): the median source size, rounded down to suit every model.
    image_size: tuple[Side, Side] | Literal["auto"] = (96, 96)
    channels: Annotated[int, Field(ge=1, le=4)] = 3
    classes: Annotated[int, Field(ge=1, le=255)] = 1
    # synthetic: how many examples to make (default 512 / 64). Real sources: filled in from the
    # scan (a given number caps how many are used).
    train_size: Annotated[int, Field(ge=1)] | None = None
    val_size: Annotated[int, Field(ge=1)] | None = None
    # synthetic: test examples to make (none by default). Real sources: filled in from the scan
    # (0: no test split), a given number caps how many are used.
    test_size: Annotated[int, Field(ge=0)] | None = None
    batch_size: Annotated[int, Field(ge=1)] = 8
    max_shapes: Annotated[int, Field(ge=1, le=8)] = 4

    @field_validator("image_size", mode="before")
    @classmethod
    def _square_from_int(cls, value: Any) -> Any:
        return (value, value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _source_complete(self, info: ValidationInfo) -> "DataSpec":
        problems = []
        for source, fields in SOURCE_FIELDS.items():
            given = [f for f in fields if getattr(self, f) is not None]
            if self.source == source:
                problems += [f"source: {source} needs data.{f}" for f in fields if f not in given]
        if self.source == "arrays" and self.arrays is None and self.images is not None and self.masks is not None:
            problems = []  # arrays given as two .npy files
        if self.source == "synthetic":
            if self.image_size == "auto":
                problems.append("image_size: auto needs a real source (folder, csv, arrays, tfds)")
            object.__setattr__(self, "train_size", self.train_size or 512)
            object.__setattr__(self, "val_size", self.val_size or 64)
            object.__setattr__(self, "test_size", self.test_size or 0)
        problems += self.unread_settings(self.source, READ_ONLY_BY, info, INSTEAD.get(self.source), called="source")
        problems += self._unread_val_fraction(info)
        if (self.test_images is None) != (self.test_masks is None):
            problems.append("test_images and test_masks go together (a separate test folder pair)")
        problems += self._label_problems()
        if problems:
            raise ValueError("; ".join(problems))
        if self.resolved and self.batch_size > self.train_size:
            raise ValueError(f"batch_size {self.batch_size} is larger than train_size {self.train_size}")
        return self

    def _label_problems(self) -> list[str]:
        """`palette`, `ignore_label` and `label_map` against the classes they name."""
        problems = []
        if self.palette is not None and len(self.palette) != max(self.classes, 2):
            problems.append(f"palette: one colour per class, {max(self.classes, 2)} expected, got {len(self.palette)}")
        if self.ignore_label is not None and self.ignore_label < max(self.classes, 2):
            problems.append(f"ignore_label: {self.ignore_label} is a class id (data.classes is {self.classes}: ids 0..{max(self.classes, 2) - 1}); "
                            "name a value no class has, such as 255")
        if self.ignore_label is not None and self.classes >= IGNORED_LABEL:
            problems.append(f"ignore_label with data.classes {self.classes}: at most {IGNORED_LABEL - 1} classes leave a value for ignored pixels")
        if self.mask_threshold is not None and (self.classes != 1 or self.label_map or self.palette or self.ignore_label is not None):
            problems.append("mask_threshold makes binary masks (foreground above it): it takes data.classes 1 and no palette, "
                            "label_map or ignore_label")
        beyond = {value: klass for value, klass in (self.label_map or {}).items() if klass >= max(self.classes, 2) and klass != self.ignore_label}
        if beyond:
            problems.append(f"label_map: {beyond} maps to classes outside 0..{max(self.classes, 2) - 1} (data.classes is {self.classes})")
        return problems

    def _unread_val_fraction(self, info: ValidationInfo) -> list[str]:
        """An explicit val_fraction beside a validation split of the source's own: never read."""
        if self.val_fraction == type(self).model_fields["val_fraction"].default or (info.context or {}).get(ACCEPTED):
            return []
        given = "data.val_images" if self.source == "folder" and self.val_images is not None else (
            f"data.tfds.val_split ({self.tfds.val_split})" if self.source == "tfds" and self.tfds is not None and self.tfds.val_split else None)
        return [f"val_fraction: the validation split is {given}, so val_fraction would not be read; leave it out"] if given else []

    @property
    def resolved(self) -> bool:
        """Sizes known: always for synthetic; for real sources once the pre-flight scan ran."""
        return self.image_size != "auto" and self.train_size is not None and self.val_size is not None

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """One image as a model sees it: (height, width, channels), after resizing."""
        if self.image_size == "auto":
            raise RuntimeError("the data source was not scanned yet (harness.data.resolve.resolve_data)")
        return (*self.image_size, self.channels)

    @property
    def has_test(self) -> bool:
        """A held-out test split exists (known once the data are resolved)."""
        return bool(self.test_size)

    @property
    def steps_per_epoch(self) -> int:
        if not self.resolved:
            raise RuntimeError("the data source was not scanned yet (harness.data.resolve.resolve_data)")
        return self.train_size // self.batch_size
