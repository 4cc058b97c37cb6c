"""Experiment config: YAML in, a frozen, validated, fully resolved object out.

Every problem is collected and reported at once (exit code 2), each with its key path. Durations
are converted to steps here and nowhere else (`TrainSpec.total_steps`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from . import zoo
from .errors import ConfigError
from .losses import parse_loss

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
REPEAT_SEPARATOR = "@"  # not allowed in model names, so repeat members never collide with a model


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OptimizerSpec(Strict):
    name: Literal["adam", "adamw", "sgd", "rmsprop"] = "adam"
    learning_rate: Annotated[float, Field(gt=0)] = 1e-3
    beta_1: Annotated[float, Field(ge=0, lt=1)] = 0.9  # adam/adamw; pix2pix uses 0.5
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    weight_decay: Annotated[float, Field(ge=0)] | None = None
    clipnorm: Annotated[float, Field(gt=0)] | None = None


class GanSpec(Strict):
    """A conditional (pix2pix-style) GAN member: `arch` is the generator, this is the rest."""

    discriminator: str = "patchgan"
    discriminator_options: dict[str, Any] = Field(default_factory=dict)
    discriminator_optimizer: OptimizerSpec = OptimizerSpec(learning_rate=2e-4, beta_1=0.5)
    l1_lambda: Annotated[float, Field(ge=0)] = 100.0  # generator loss = adversarial + l1_lambda x L1
    # per_model placement: the discriminator on the generator's device, or on the next one
    discriminator_device: Literal["same", "next"] = "same"


KIND_PATTERN = r"^(supervised|gan|autoencoder|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$"


class ModelSpec(Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
    # supervised (one model, one loss), gan, autoencoder, or your own: package.module:Class
    kind: Annotated[str, Field(pattern=KIND_PATTERN)] = "supervised"
    arch: str
    backbone: str | None = None
    weights: Path | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    loss: str | None = None
    optimizer: OptimizerSpec | None = None
    jit_compile: bool | None = None
    gan: GanSpec | None = None  # kind: gan only; defaults filled in

    @field_validator("loss")
    @classmethod
    def _loss_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_loss(value)
        return value

    @field_validator("weights")
    @classmethod
    def _weights_exist(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"weights file {str(value)!r} does not exist")
        return value

    @model_validator(mode="after")
    def _arch_known(self) -> "ModelSpec":
        problems = zoo.check_spec(self.arch, self.backbone, self.options)
        if self.gan is not None and self.kind != "gan":
            problems.append(f"'gan' settings apply to kind: gan, not kind: {self.kind}")
        if self.kind == "gan":
            gan = self.gan or GanSpec()
            problems += [f"gan.discriminator: {p}" for p in zoo.check_spec(gan.discriminator, None, gan.discriminator_options)]
            object.__setattr__(self, "gan", gan)
        if ":" in self.kind:
            from .kinds import check_kind

            problems += check_kind(self.kind)
        if problems:
            raise ValueError("; ".join(problems))
        return self


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
    image_key: str = "image"
    mask_key: str = "segmentation_mask"


SOURCES = ("synthetic", "folder", "csv", "arrays", "tfds")
SOURCE_FIELDS = {"folder": ("images", "masks"), "csv": ("manifest",), "arrays": ("arrays",), "tfds": ("tfds",)}
Side = Annotated[int, Field(ge=8, le=4096)]


class DataSpec(Strict):
    # synthetic: generated shapes. folder: images/ and masks/ matched by file stem. csv: a
    # manifest of image,mask[,split] paths. arrays: one .npz (images, masks[, val_images,
    # val_masks]) or images/masks .npy files. tfds: a TFDS dataset on disk.
    source: Literal[SOURCES] = "synthetic"  # type: ignore[valid-type]
    images: Path | None = None
    masks: Path | None = None
    val_images: Path | None = None  # folder source: a separate validation folder pair
    val_masks: Path | None = None
    manifest: Path | None = None
    arrays: Path | None = None
    tfds: TfdsSpec | None = None
    # Real sources without a given split: this share, chosen by a hash of each file's stem, so
    # adding files never moves existing ones between train and val.
    val_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    on_bad_data: Literal["fail", "skip"] = "fail"  # skip: leave bad files out, and count them
    palette: list[tuple[int, int, int]] | None = None  # RGB masks: the colour of class 0, 1, ...
    fit: Literal["resize", "crop"] = "resize"  # to image_size: stretch, or scale + centre crop
    cache: Literal["memory", "disk"] = "memory"  # disk: decoded arrays kept beside the runs
    augment: AugmentSpec = AugmentSpec()
    # "auto" (real sources): the median source size, rounded down to suit every model.
    image_size: tuple[Side, Side] | Literal["auto"] = (96, 96)
    channels: Annotated[int, Field(ge=1, le=4)] = 3
    classes: Annotated[int, Field(ge=1, le=255)] = 1
    # synthetic: how many examples to make (default 512 / 64). Real sources: filled in from the
    # scan (a given number caps how many are used).
    train_size: Annotated[int, Field(ge=1)] | None = None
    val_size: Annotated[int, Field(ge=1)] | None = None
    batch_size: Annotated[int, Field(ge=1)] = 8
    max_shapes: Annotated[int, Field(ge=1, le=8)] = 4

    @field_validator("image_size", mode="before")
    @classmethod
    def _square_from_int(cls, value: Any) -> Any:
        return (value, value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _source_complete(self) -> "DataSpec":
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
        if self.palette is not None and len(self.palette) != max(self.classes, 2):
            problems.append(f"palette: one colour per class, {max(self.classes, 2)} expected, got {len(self.palette)}")
        if problems:
            raise ValueError("; ".join(problems))
        if self.resolved and self.batch_size > self.train_size:
            raise ValueError(f"batch_size {self.batch_size} is larger than train_size {self.train_size}")
        return self

    @property
    def resolved(self) -> bool:
        """Sizes known: always for synthetic; for real sources once the pre-flight scan ran."""
        return self.image_size != "auto" and self.train_size is not None and self.val_size is not None

    @property
    def steps_per_epoch(self) -> int:
        if not self.resolved:
            raise RuntimeError("the data source was not scanned yet (harness.sources.resolve_data)")
        return self.train_size // self.batch_size

class TrainSpec(Strict):
    epochs: Annotated[int, Field(ge=1)] = 1
    steps: Annotated[int, Field(ge=1)] | None = None
    steps_per_call: Annotated[int, Field(ge=1, le=10_000)] = 10
    loss: str = "bce+dice"
    optimizer: OptimizerSpec = OptimizerSpec()
    deterministic: bool = False
    jit_compile: bool = False
    # None keeps each model's own (Keras: 0.99). Short comparisons want ~0.9: with 0.99 the moving
    # averages lag the weights for hundreds of steps and inference-mode validation is meaningless.
    batchnorm_momentum: Annotated[float, Field(ge=0, lt=1)] | None = None
    # None: at the end of every epoch. A checkpoint is always written at the end of the run.
    checkpoint_every_steps: Annotated[int, Field(ge=1)] | None = None
    keep_checkpoints: Annotated[int, Field(ge=1, le=1000)] = 3
    # Each model is trained from this many initial seeds at once, as extra members of the same
    # step (same batches), so tables can give mean, spread and a 95% interval per model.
    repeats: Annotated[int, Field(ge=1, le=20)] = 1
    # Skip the update of a member whose loss or gradients are not finite, and freeze it as
    # diverged. Costs a few % of a small model's step at steps_per_call 1 (see Benchmarks).
    isolate_divergence: bool = True

    @field_validator("loss")
    @classmethod
    def _loss_parses(cls, value: str) -> str:
        parse_loss(value)
        return value


class SplitGpuSpec(Strict):
    count: Annotated[int, Field(ge=2, le=64)] = 2
    memory_mb: Annotated[int, Field(ge=256)] = 4096


class PlacementSpec(Strict):
    strategy: Literal["auto", "one_device", "mirrored", "per_model", "split_gpu", "multi_worker"] = "auto"
    device: str | None = None  # one_device: e.g. /gpu:1 or /cpu:0
    devices: list[str] | None = None  # mirrored / per_model: default every GPU (or every CPU device)
    # Split the CPU into N logical devices, to try mirrored/per_model on a machine with no GPU.
    logical_cpus: Annotated[int, Field(ge=1, le=64)] | None = None
    split_gpu: SplitGpuSpec = SplitGpuSpec()
    precision: Literal["float32", "mixed_float16", "mixed_bfloat16"] = "float32"


RANK_METRICS = ("val_iou", "val_f1", "val_loss", "best_val_loss", "final_train_loss")


class MlflowSpec(Strict):
    tracking_uri: str = "file:./mlruns"
    experiment: str | None = None  # default: the experiment's name


class ThresholdSpec(Strict):
    """How much worse a metric may get before `harness nightly` calls it a regression: by an
    absolute amount (`abs: 0.02` of IoU) or relative to the earlier value (`rel: 0.10` = 10%)."""

    abs: Annotated[float, Field(ge=0)] | None = None
    rel: Annotated[float, Field(ge=0)] | None = None
    # None: known from the metric's name (IoU, F1, images/s up; losses, ms/step down).
    higher_is_better: bool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "ThresholdSpec":
        if (self.abs is None) == (self.rel is None):
            raise ValueError("give exactly one of 'abs' (an amount) or 'rel' (a fraction, 0.1 = 10%)")
        return self


def _default_thresholds() -> dict[str, ThresholdSpec]:
    return {"val_iou": ThresholdSpec(abs=0.02), "best_val_loss": ThresholdSpec(rel=0.10)}


class NightlySpec(Strict):
    """`harness nightly`: which summary.csv columns are watched, and how runs are kept."""

    # summary.csv column -> threshold. Timing (ms_per_step) is not watched unless you add it:
    # it depends on the machine's load as much as on your code.
    thresholds: dict[str, ThresholdSpec] = Field(default_factory=_default_thresholds)
    # Checkpoints of the newest N nightly runs (and of the pinned baseline) are kept; older runs
    # keep their tables, plots, exported models and history rows.
    keep_checkpoints_of_runs: Annotated[int, Field(ge=1, le=10_000)] = 3
    # A "night" runs from this local hour to the same hour the next day, so a run started at
    # 23:50 and resumed at 00:20 is the same night.
    night_starts_at_hour: Annotated[int, Field(ge=0, le=23)] = 12


class OutputSpec(Strict):
    results_dir: Path = Path("results")
    probe_steps: Annotated[int, Field(ge=0, le=1000)] = 5
    export: bool = True
    rank_by: Literal[RANK_METRICS] = "val_iou"  # type: ignore[valid-type]
    log_scale: bool = False  # loss curves on a log axis
    sample_images: Annotated[int, Field(ge=0, le=16)] = 4  # validation images in samples.png
    tensorboard: bool = True
    mlflow: MlflowSpec | None = None  # pip install "harness[mlflow]"
    progress: Literal["auto", "bar", "lines", "none"] = "auto"
    nightly: NightlySpec = NightlySpec()


class ExperimentConfig(Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
    seed: Annotated[int, Field(ge=0, lt=2**31)] = 0
    data: DataSpec = DataSpec()
    models: Annotated[list[ModelSpec], Field(min_length=1)]
    train: TrainSpec = TrainSpec()
    placement: PlacementSpec = PlacementSpec()
    output: OutputSpec = OutputSpec()

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelSpec]) -> list[ModelSpec]:
        seen: set[str] = set()
        dupes = [m.name for m in models if m.name in seen or seen.add(m.name)]
        if dupes:
            raise ValueError(f"model names must be unique; repeated: {', '.join(sorted(set(dupes)))}")
        return models

    @model_validator(mode="after")
    def _resolve(self) -> "ExperimentConfig":
        networks = [(m.name, m.arch, m.options) for m in self.models]
        networks += [(f"{m.name}.discriminator", m.gan.discriminator, m.gan.discriminator_options) for m in self.models if m.gan]
        size_problems = [] if self.data.image_size == "auto" else zoo.check_input_size(networks, self.data.image_size)
        if size_problems:
            raise ValueError("\n".join(size_problems))
        # Defaults are filled into each model so config.yaml says exactly what each one used.
        filled = [
            m.model_copy(
                update={
                    "loss": m.loss or self.train.loss,
                    "optimizer": m.optimizer or self.train.optimizer,
                    "jit_compile": self.train.jit_compile if m.jit_compile is None else m.jit_compile,
                }
            )
            for m in self.models
        ]
        object.__setattr__(self, "models", filled)
        return self

    def member_specs(self) -> list[ModelSpec]:
        """One spec per trained member: each model, or with repeats R each model R times
        (`unet@1` .. `unet@R`), differing only in their initial weights."""
        if self.train.repeats == 1:
            return list(self.models)
        return [
            m.model_copy(update={"name": f"{m.name}{REPEAT_SEPARATOR}{r}"})
            for m in self.models
            for r in range(1, self.train.repeats + 1)
        ]

    def input_multiple(self) -> int:
        """Each side of the input must be a multiple of this for every model (and discriminator)."""
        import math

        networks = [(m.arch, m.options) for m in self.models]
        networks += [(m.gan.discriminator, m.gan.discriminator_options) for m in self.models if m.gan]
        return math.lcm(*(zoo.input_multiple(arch, options) for arch, options in networks))

    @property
    def total_steps(self) -> int:
        return self.train.steps or self.train.epochs * self.data.steps_per_epoch

    def fingerprint(self) -> str:
        """A short hash of what is trained: not where results go, nor where it runs (a run trained
        under one placement may be resumed under another)."""
        payload = self.to_dict()
        payload.pop("output", None)
        payload.pop("placement", None)
        blob = json.dumps(payload, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ---------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment, apply `key.path=value` overrides and validate it all at once."""
    raw = _read_yaml(Path(path))
    problems: list[str] = []
    for override in overrides or []:
        try:
            apply_override(raw, override)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(f"bad --set override in {path}:", problems)
    return validate_config(raw, source=str(path))


def validate_config(raw: Any, source: str = "config") -> ExperimentConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(
            f"{source}: {exc.error_count()} problem(s) in the config:",
            [_describe_error(err, raw) for err in exc.errors()],
        ) from None


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}") from None


# ---------------------------------------------------------------------------------------------
# --set overrides


def apply_override(raw: dict, override: str) -> None:
    """Apply `a.b.c=value` in place. The value is parsed as YAML so `3`, `true`, `[96, 96]` are typed;
    pydantic then checks it against the schema like any other value. A list of models may be
    indexed by position (`models.0.backbone`) or by model name (`models.unet.backbone`)."""
    if "=" not in override:
        raise ConfigError(f"{override!r}: expected key.path=value")
    key, _, text = override.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"{override!r}: empty key path")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    node: Any = raw
    schema: Any = ExperimentConfig
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            index = _list_index(node, part, where)
            if last:
                node[index] = value
                return
            node = node[index]
            schema = _item_type(schema)
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:depth])} is not a mapping")
        fields = _field_names(schema)
        if fields is not None and part not in fields:
            raise ConfigError(f"--set {key}: unknown key {where!r}{_did_you_mean(part, fields)}")
        if last:
            node[part] = value
            return
        child_schema = _field_type(schema, part)
        if part not in node or node[part] is None:
            node[part] = [] if _is_list(child_schema) else {}
        node = node[part]
        schema = child_schema


def _list_index(items: list, part: str, where: str) -> int:
    if part.lstrip("-").isdigit():
        index = int(part)
        if -len(items) <= index < len(items):
            return index
        raise ConfigError(f"--set {where}: index {index} out of range (the list has {len(items)} items)")
    names = [item.get("name") for item in items if isinstance(item, dict)]
    if part in names:
        return names.index(part)
    raise ConfigError(f"--set {where}: no item named {part!r}{_did_you_mean(part, [n for n in names if n])}")


# ---------------------------------------------------------------------------------------------
# Schema introspection, for did-you-mean hints on unknown keys


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated so `OptimizerSpec | None` gives OptimizerSpec."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else annotation
    return annotation


def _field_names(schema: Any) -> list[str] | None:
    schema = _unwrap(schema)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return list(schema.model_fields)
    return None


def _field_type(schema: Any, name: str) -> Any:
    schema = _unwrap(schema)
    if isinstance(schema, type) and issubclass(schema, BaseModel) and name in schema.model_fields:
        return schema.model_fields[name].annotation
    return None


def _is_list(schema: Any) -> bool:
    return typing.get_origin(_unwrap(schema)) is list


def _item_type(schema: Any) -> Any:
    args = typing.get_args(_unwrap(schema))
    return args[0] if args else None


def _schema_at(loc: tuple) -> Any:
    schema: Any = ExperimentConfig
    for part in loc:
        if isinstance(part, int):
            schema = _item_type(schema)
        else:
            schema = _field_type(schema, part)
        if schema is None:
            return None
    return schema


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; expected one of: {', '.join(choices)}"


def _loc_name(loc: tuple, raw: Any) -> str:
    """`models.1.backbone`, with the model's name added when it has one: `models.1(unet).backbone`."""
    parts: list[str] = []
    node = raw
    for part in loc:
        label = str(part)
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            node = node[part]
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                label = f"{part}({node['name']})"
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            node = None
        parts.append(label)
    return ".".join(parts) or "(top level)"


def _describe_error(err: dict, raw: Any) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # pydantic reports `tuple[int, int]` positions and union branches as extra loc parts.
    loc = tuple(p for p in loc if p not in ("int", "str", "float", "bool"))
    where = _loc_name(loc, raw)
    kind = err["type"]
    if kind == "extra_forbidden":
        choices = _field_names(_schema_at(loc[:-1])) or []
        return f"{where}: unknown key{_did_you_mean(str(loc[-1]), choices)}"
    if kind == "missing":
        return f"{where}: required key is missing"
    message = re.sub(r"^(Value error|Assertion failed), ", "", err["msg"])
    got = err.get("input")
    shown = "" if kind.startswith("value_error") or isinstance(got, (dict, list)) else f" (got {got!r})"
    return f"{where}: {message}{shown}"
