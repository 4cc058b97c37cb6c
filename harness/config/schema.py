"""The experiment schema: a frozen, validated, fully resolved object (pydantic).

Durations are converted to steps here and nowhere else (`ExperimentConfig.total_steps`). Models
are checked by name against the catalogue; code a config names (factories, kinds) is imported
only when a run builds it (`harness.members.registry.check_code`).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationInfo, field_validator, model_validator

from harness.config import metrics
from harness.config.consistency import combination_problems, loss_problems, sized_problems
from harness.config.changes import added_off_default, changed_since, keys_like
from harness.config.catalog import check_input_size, check_spec, input_multiple, min_side, script_module_problem, weights_paths
from harness.config.grid import expand_grids
from harness.config.data_spec import SOURCES, AugmentSpec, DataSpec, TfdsSpec
from harness.config.recipes import ACCEPTED, EarlyStoppingSpec, RaceSpec, ScheduleSpec, Strict
from harness.config.naming import member_name, training_seed
from harness.config.nightly_spec import NightlySpec, ThresholdSpec, default_thresholds
from harness.config.losses import RECONSTRUCTION_LOSS, kind_loss_problems, parse_loss
from harness.errors import closest, did_you_mean

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_RULE = ("a name is letters, digits, '_', '.' and '-', starting with a letter or digit (it names folders and "
             "files; '@' is kept for the seeds of train.repeats: unet@2)")
__all__ = ["SOURCES", "AugmentSpec", "DataSpec", "ExperimentConfig", "TfdsSpec"]


OPTIMIZER_READS = {"beta_1": ("adam", "adamw"), "momentum": ("sgd", "rmsprop"), "weight_decay": ("adamw",)}


class OptimizerSpec(Strict):
    name: Literal["adam", "adamw", "sgd", "rmsprop"] = "adam"
    learning_rate: Annotated[float, Field(gt=0)] = 1e-3
    beta_1: Annotated[float, Field(ge=0, lt=1)] = 0.9  # adam/adamw; pix2pix uses 0.5
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    weight_decay: Annotated[float, Field(ge=0)] | None = None
    clipnorm: Annotated[float, Field(gt=0)] | None = None
    schedule: ScheduleSpec | None = None  # None: the train-level optimizer's, else constant

    @model_validator(mode="after")
    def _settings_it_reads(self, info: ValidationInfo) -> "OptimizerSpec":
        # A grid over weight_decay under adam would train every member alike, and say so as a
        # comparison: refused, as any setting the optimizer does not read.
        if problems := self.unread_settings(self.name, OPTIMIZER_READS, info, {"momentum": "beta_1", "beta_1": "momentum"}):
            raise ValueError("; ".join(problems))
        return self


class GanSpec(Strict):
    """A conditional (pix2pix-style) GAN member: `arch` is the generator, this is the rest."""

    discriminator: str = "patchgan"
    discriminator_options: dict[str, Any] = Field(default_factory=dict)
    discriminator_optimizer: OptimizerSpec = OptimizerSpec(learning_rate=2e-4, beta_1=0.5)
    l1_lambda: Annotated[float, Field(ge=0)] = 100.0  # generator loss = adversarial + l1_lambda x L1
    # per_model placement: the discriminator on the generator's device, or on the next one
    discriminator_device: Literal["same", "next"] = "same"


KIND_PATTERN = r"^(supervised|gan|autoencoder|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$"
# What a value that misses a pattern is told, in words (config/loading.py): not the regular expression.
PATTERN_RULES = {
    NAME_PATTERN: NAME_RULE,
    KIND_PATTERN: "a kind is supervised, gan, autoencoder, or a class of your own as package.module:Class (a module's name, not its file's)",
}


class ModelSpec(Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
    # supervised (one model, one loss), gan, autoencoder, or your own: package.module:Class
    kind: Annotated[str, Field(pattern=KIND_PATTERN)] = "supervised"
    arch: str
    backbone: str | None = None
    weights: Path | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def predicts_masks(self) -> bool:
        """Whether the member is scored on masks (IoU, F1, a segmentation loss): every kind but an
        autoencoder, which reconstructs images. The one place that asks a kind what it predicts
        before any code is imported."""
        return self.kind != "autoencoder"
    loss: str | None = None
    optimizer: OptimizerSpec | None = None
    jit_compile: bool | None = None
    gan: GanSpec | None = None  # kind: gan only; defaults filled in
    # `grid: {key: [values]}` is expanded into one member per combination before validation
    # (harness.config.grid); a member keeps the values it was given in `grid_values`.
    grid: dict[str, list[Any]] | None = Field(default=None, exclude=True)
    grid_values: dict[str, Any] = Field(default_factory=dict)

    @field_validator("loss")
    @classmethod
    def _loss_parses(cls, value: str | None) -> str | None:
        if value is not None and value != RECONSTRUCTION_LOSS:  # whose loss mse may be: kind_loss_problems
            parse_loss(value)
        return value

    @field_validator("weights")
    @classmethod
    def _weights_exist(cls, value: Path | None) -> Path | None:
        if value is None or weights_paths(value):
            return value
        hint = "" if value.suffix else (
            "; weights is a file you have (.h5, .keras, or a TensorFlow checkpoint's prefix): pretrained weights such as "
            "'imagenet' would be downloaded, and harness downloads nothing (docs/members.md, \"Pretrained weights\")")
        where = "" if value.is_absolute() else f" (a relative path is read from the current folder, {Path.cwd()})"
        raise ValueError(f"weights file {str(value)!r} does not exist{where}{hint}")

    @model_validator(mode="after")
    def _arch_known(self, info: ValidationInfo) -> "ModelSpec":
        problems = check_spec(self.arch, self.backbone, self.options)
        problems += [problem] if (problem := script_module_problem(self.kind, "kind")) else []
        problems += kind_loss_problems(self.predicts_masks, self.loss, (info.context or {}).get(ACCEPTED, False))
        if self.gan is not None and self.kind != "gan":
            problems.append(f"'gan' settings apply to kind: gan, not kind: {self.kind}")
        if self.kind == "gan":
            gan = self.gan or GanSpec()
            problems += [f"gan.discriminator: {p}" for p in check_spec(gan.discriminator, None, gan.discriminator_options)]
            object.__setattr__(self, "gan", gan)
        if problems:
            raise ValueError("; ".join(problems))
        return self


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
    # None: at the end of every epoch. A checkpoint is always written at the end of the run, and
    # each member's best.keras is written with the checkpoints (training/export.py, BestTracker).
    checkpoint_every_steps: Annotated[int, Field(ge=1)] | None = None
    keep_checkpoints: Annotated[int, Field(ge=1, le=1000)] = 3
    # Each model is trained this many times at once, as extra members of the same step: repeat r
    # has its own training seed (seed + r - 1: initial weights, data order, augmentation), and
    # repeat r of every model shares its batches, so comparisons stay paired within a repeat.
    repeats: Annotated[int, Field(ge=1, le=20)] = 1
    # Skip the update of a member whose loss or gradients are not finite, and freeze it as
    # diverged. Costs a few % of a small model's step at steps_per_call 1 (see Benchmarks).
    isolate_divergence: bool = True
    early_stopping: EarlyStoppingSpec | None = None
    race: RaceSpec | None = None

    @field_validator("loss")
    @classmethod
    def _loss_parses(cls, value: str) -> str:
        parse_loss(value)
        return value


class SplitGpuSpec(Strict):
    count: Annotated[int, Field(ge=2, le=64)] = 2
    memory_mb: Annotated[int, Field(ge=256)] = 4096


class RaySpec(Strict):
    """`placement.engine: ray`: each group is one Ray task (pip install "harness[ray]")."""

    address: str | None = None  # None: RAY_ADDRESS if set, else a local Ray instance
    max_retries: Annotated[int, Field(ge=0, le=100)] = 2  # for lost workers and nodes, not for errors
    cpus_per_group: Annotated[float, Field(gt=0)] = 1.0  # on machines without GPUs


class PlacementSpec(Strict):
    strategy: Literal["auto", "one_device", "mirrored", "per_model", "split_gpu", "multi_worker"] = "auto"
    device: str | None = None  # one_device: e.g. /gpu:1 or /cpu:0
    devices: list[str] | None = None  # mirrored / per_model: default every GPU (or every CPU device)
    # Split the CPU into N logical devices, to try mirrored/per_model on a machine with no GPU.
    logical_cpus: Annotated[int, Field(ge=1, le=64)] | None = None
    split_gpu: SplitGpuSpec = SplitGpuSpec()
    precision: Literal["float32", "mixed_float16", "mixed_bfloat16"] = "float32"
    # Groups: members packed into fused steps that fit, each group in a process of its own.
    # auto: plan groups when a budget or a group size is given, or on GPUs; single: one fused
    # step in this process (what each group runs).
    grouping: Literal["auto", "single"] = "auto"
    memory_budget_mb: Annotated[int, Field(ge=1)] | None = None  # per device; None: 90% of a GPU's, no limit on a CPU
    max_members_per_group: Annotated[int, Field(ge=1)] | None = None
    parallel_groups: Annotated[int, Field(ge=1, le=1024)] | None = None  # None: one per GPU; on a CPU, 1
    engine: Literal["local", "ray"] = "local"  # ray: groups as Ray tasks, across a cluster's machines
    ray: RaySpec = RaySpec()




class MlflowSpec(Strict):
    tracking_uri: str = "file:./mlruns"
    experiment: str | None = None  # default: the experiment's name
    log_models: bool = False  # also each member's exported models/ as artifacts (large)
    # Each request to a tracking server gives up after this long, without retries: a server that is
    # down costs a warning and at most this long, then no more tracking for that run.
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0


class OutputSpec(Strict):
    results_dir: Path = Path("results")
    probe_steps: Annotated[int, Field(ge=0, le=1000)] = 5
    # Each probe call times at most probe_steps steps, fewer when one step shows that fewer fill
    # probe_seconds (the quickstart's 2.6-s fused step is timed once, not five times).
    probe_seconds: Annotated[float, Field(gt=0, le=3600)] = 2.0
    export: bool = True
    # keras: models/<name>/model.keras (tf_keras). saved_model: models/<name>/model_saved_model/, a
    # TensorFlow SavedModel with a `serve` endpoint, for serving and for Keras 3 or plain TF readers.
    export_formats: Annotated[list[Literal["keras", "saved_model"]], Field(min_length=1)] = ["keras"]
    # plots/ files: PNG (what the report shows); add svg for vector copies (about a third more
    # plotting time: 40 models' plots took 8 s more with them). [] draws no plots at all (nor the
    # nightly trends): the tables, verdicts and the report's interactive curves stay. Drawing costs
    # a tiny 3-model run 3.8 s of CPU, more than its training: a nightly job nobody looks at, or
    # a large grid, may not want it.
    plot_formats: list[Literal["png", "svg"]] = ["png"]
    # Validation scores every member on the common loss too: null (when members train on
    # different losses), true or false.
    val_compare_loss: bool | None = None
    # What each model costs to serve, measured after training: latency at batch 1, images/s at
    # serve_batch, the measurement's peak memory, the exported file's size.
    serve_probe: bool = True
    serve_batch: Annotated[int, Field(ge=1, le=4096)] = 8
    rank_by: Literal[metrics.RANK_METRICS] = "val_iou"  # type: ignore[valid-type]
    # The smallest difference in the ranking metric that matters to you (0.01: one point of IoU).
    # With train.repeats, pairs.csv says which pairs are equivalent: their difference smaller than
    # it with 95% confidence (outputs/statistics.py, mark_equivalence).
    equivalence_margin: Annotated[float, Field(gt=0)] | None = None
    # The weights scored on the test split: best (each member's state at its best validation loss,
    # or by the early-stopping metric when that is on: models/<name>/best.keras) or final.
    select_by: Literal["best", "final"] = "best"
    # Per-group verdicts: group the models by these settings (any key of a model entry, dotted for
    # nested ones, e.g. [arch] or [arch, backbone]), choose each group's best on validation (its
    # best learning rate, say), and compare the chosen ones, on test when there is a test split.
    compare_by: list[str] = Field(default_factory=list)
    log_scale: bool = False  # loss curves on a log axis
    sample_images: Annotated[int, Field(ge=0, le=16)] = 4  # validation images in samples.png
    tensorboard: bool = True
    mlflow: MlflowSpec | None = None  # pip install "harness[mlflow]"
    progress: Literal["auto", "bar", "lines", "none"] = "auto"
    nightly: NightlySpec = NightlySpec()
    # The loss every member is also scored on, on the very same batches, so pairs.csv compares
    # like with like. None: the loss most members train on (bce, or cce with data.classes above 1,
    # when no loss is the most common).
    compare_loss: str | None = None

    @field_validator("rank_by", mode="before")
    @classmethod
    def _rank_by_names_validation(cls, value):
        split, _, metric = str(value).partition("_")
        if split == "test" and metric:
            scores = [score for split_of, score in map(metrics.split_column, metrics.RANK_METRICS) if split_of == "val"]
            metric = metric if metric in scores else closest(metric, scores)  # test_iuo: val_iou, not val_iuo
            named, on = (f"the validation score, val_{metric}", f"test_{metric}") if metric else \
                (f"a validation score ({', '.join('val_' + score for score in scores)})", "its test score")
            raise ValueError(f"name {named}: the ranking is on {on} by itself whenever "
                             "the data hold out a test split (data.test_size, data.test_fraction or a test folder; each model's "
                             "weights are then chosen on validation and scored once on test)")
        return value

    @field_validator("compare_loss")
    @classmethod
    def _compare_loss_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_loss(value)
        return value


class ExperimentConfig(Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
    # The training seed: initial weights, data order and augmentation draws (not the data: data.seed).
    seed: Annotated[int, Field(ge=0, lt=2**31 - 64)] = 0
    data: DataSpec = DataSpec()
    models: Annotated[list[ModelSpec], Field(min_length=1)]
    train: TrainSpec = TrainSpec()
    placement: PlacementSpec = PlacementSpec()
    output: OutputSpec = OutputSpec()

    @model_validator(mode="before")
    @classmethod
    def _expand_grids(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        expanded, _, problems = expand_grids(raw)
        if problems:
            raise ValueError("; ".join(problems))
        return expanded

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelSpec], info: ValidationInfo) -> list[ModelSpec]:
        seen: set[str] = set()
        dupes = [m.name for m in models if m.name in seen or seen.add(m.name)]
        if dupes:
            raise ValueError(f"model names must be unique; repeated: {', '.join(sorted(set(dupes)))}")
        # Each name is a folder (models/, tb/, checkpoints): on macOS and Windows, whose file systems
        # ignore case, `Unet` and `unet` would be one folder and one model's files would overwrite the other's.
        by_case: dict[str, list[str]] = {}
        for m in models:
            by_case.setdefault(m.name.lower(), []).append(m.name)
        clashes = [" and ".join(names) for names in by_case.values() if len(names) > 1]
        if clashes and not (info.context or {}).get(ACCEPTED):  # a run made before this check stays readable where it ran
            raise ValueError(f"model names must differ in more than case (each names a folder, and macOS and Windows ignore case): {'; '.join(clashes)}")
        return models

    @model_validator(mode="after")
    def _compare_by_keys(self) -> "ExperimentConfig":
        fields = set(ModelSpec.model_fields) - {"grid", "grid_values", "name"}
        grid_keys = {k for m in self.models for k in m.grid_values}
        unknown = [k for k in self.output.compare_by if k.split(".")[0] not in fields and k not in grid_keys]
        if unknown:
            raise ValueError(f"output.compare_by: {', '.join(map(repr, unknown))} is not a setting of a model entry"
                             f"{did_you_mean(unknown[0], sorted(fields | grid_keys), 'choose from')}")
        return self

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> "ExperimentConfig":
        multiples = {name: (arch, input_multiple(arch, options)) for name, arch, options in self.networks()}
        size_problems = [] if self.data.image_size == "auto" else check_input_size(multiples, self.data.image_size, self.least_side())
        if size_problems:
            raise ValueError("\n".join(size_problems))
        # Defaults are filled into each model so config.yaml says exactly what each one used.
        filled = [
            m.model_copy(
                update={
                    "loss": m.loss or (self.train.loss if m.predicts_masks else RECONSTRUCTION_LOSS),
                    "optimizer": self._with_default_schedule(m.optimizer or self.train.optimizer),
                    "jit_compile": self.train.jit_compile if m.jit_compile is None else m.jit_compile,
                }
            )
            for m in self.models
        ]
        object.__setattr__(self, "models", filled)
        problems = combination_problems(self) + ([] if (info.context or {}).get(ACCEPTED) else loss_problems(self))
        if self.data.source == "synthetic":  # sizes known now; real data is checked after its scan
            problems += sized_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _with_default_schedule(self, optimizer: OptimizerSpec) -> OptimizerSpec:
        if optimizer.schedule is None and self.train.optimizer.schedule is not None:
            return optimizer.model_copy(update={"schedule": self.train.optimizer.schedule})
        return optimizer

    def optimizer_in_steps(self, optimizer: OptimizerSpec) -> OptimizerSpec:
        """The optimizer with its schedule's durations in steps (needs the data's sizes)."""
        if optimizer.schedule is None:
            return optimizer
        return optimizer.model_copy(update={"schedule": optimizer.schedule.in_steps(self.data.steps_per_epoch, self.total_steps)})

    def member_specs(self) -> list[ModelSpec]:
        """One spec per trained member: each model, or with repeats R each model R times
        (`unet@1` .. `unet@R`), each repeat with its own training seed (`training_seeds`)."""
        repeats = self.train.repeats
        if repeats == 1:
            return list(self.models)
        return [m.model_copy(update={"name": member_name(m.name, r, repeats)}) for m in self.models for r in range(1, repeats + 1)]

    def training_seeds(self) -> tuple[int, ...]:
        """The training seed of each repeat, in order: one input stream each."""
        return tuple(training_seed(self.seed, r) for r in range(1, self.train.repeats + 1))

    def ranking_column(self, test_scored: bool = True) -> str:
        """The summary column models are ranked by: `output.rank_by`, but on the held-out test split
        when there is one (a validation metric becomes its test twin: val_iou -> test_iou).
        `test_scored`: whether the run scored its test split (`RunRecord.scored_test`; it does at
        its end): a run stopped before it ranks on validation, by the scores it has."""
        rank_by = self.output.rank_by
        if rank_by == metrics.column("compare_loss") and not self.losses_differ():
            rank_by = metrics.column("loss")  # every member trains on the common loss: the same numbers
        if self.data.has_test and test_scored and metrics.split_column(rank_by)[0] == "val":
            return metrics.on_split(rank_by, "test")
        return rank_by

    def nightly_thresholds(self) -> dict[str, ThresholdSpec]:
        """What `harness nightly` watches: output.nightly.thresholds. Left at the defaults: with a
        test split, each watched validation score's test twin too (val_iou -> test_iou, the same
        threshold), first: the score the ranking reports, on images nothing chose with; and where no
        member predicts masks (autoencoders alone), val_loss in val_iou's place."""
        thresholds = dict(self.output.nightly.thresholds)
        if thresholds != default_thresholds():
            return thresholds
        if not any(m.predicts_masks for m in self.models):  # reconstructions report no IoU: their score is the loss
            thresholds = {"val_loss": thresholds["best_val_loss"], "best_val_loss": thresholds["best_val_loss"]}
        if self.data.has_test:
            twins = {metrics.on_split(name, "test"): spec for name, spec in thresholds.items() if metrics.split_column(name)[0] == "val"}
            return {**twins, **thresholds}
        return thresholds

    def mask_losses(self) -> list[str]:
        """The losses the members that predict masks train on, each once, sorted."""
        return sorted({m.loss for m in self.models if m.predicts_masks})

    def compare_loss(self) -> str | None:
        """The common loss pairs compare members on (None: no member predicts masks)."""
        if self.output.compare_loss is not None:
            return self.output.compare_loss
        losses = [m.loss for m in self.models if m.predicts_masks]
        if not losses:
            return None
        counts = Counter(losses)
        top = max(counts.values())
        winners = [loss for loss in dict.fromkeys(losses) if counts[loss] == top]
        if len(winners) == 1:
            return winners[0]
        return "bce" if self.data.classes == 1 else "cce"  # no loss the most common: the cross-entropy of the output's kind

    def scored_on_compare_loss(self, spec: "ModelSpec") -> bool:
        """Whether a member needs the common loss computed apart: its own training loss is another
        one (or its kind's `loss` is not a plain segmentation loss)."""
        common = self.compare_loss()
        return common is not None and spec.predicts_masks and (spec.kind != "supervised" or spec.loss != common)

    def losses_differ(self) -> bool:
        """Whether some member trains on a loss others do not: then validation scores every member
        on the common loss too (`val_compare_loss`), and its own `val_loss` ranks nothing unwarned.
        A group of a larger run is told the whole run's answer (`output.val_compare_loss`): its own
        members may all share one loss while the run's do not."""
        if self.output.val_compare_loss is not None:
            return self.output.val_compare_loss and self.compare_loss() is not None
        return any(self.scored_on_compare_loss(m) for m in self.models)

    def least_side(self) -> int:
        """The smallest side every model builds with (inceptionv3: 75; else 1), beside each
        network's multiple (`networks`)."""
        return max(min_side(m.arch, m.backbone) for m in self.models)

    def networks(self) -> list[tuple[str, str, dict]]:
        """(name, arch, options) of every network the models build, discriminators included."""
        networks = [(m.name, m.arch, m.options) for m in self.models]
        networks += [(f"{m.name}.discriminator", m.gan.discriminator, m.gan.discriminator_options) for m in self.models if m.gan]
        return networks

    @property
    def total_steps(self) -> int:
        return self.train.steps or self.train.epochs * self.data.steps_per_epoch

    def fingerprint(self, keys_of: dict | None = None) -> str:
        """A short hash of what is trained: not where results go, nor where it runs (a run trained
        under one placement may be resumed under another). `keys_of`: hash only the keys this
        older config dict had (a setting added since, at its default, changes nothing)."""
        payload = self._trained()
        if keys_of is not None:
            payload = keys_like(payload, keys_of)
        blob = json.dumps(payload, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def _trained(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if k not in ("output", "placement")}

    def trains_as_recorded(self, fingerprint: str | None, recorded: dict | None) -> bool:
        """Whether a run recorded with this fingerprint and config (run.json) trains what this
        config trains: the same fingerprint, or the same on the keys its config had with every
        setting added since at its default (changes.py). A run that recorded no fingerprint is
        taken to."""
        if fingerprint is None or fingerprint == self.fingerprint():
            return True
        return (recorded is not None and fingerprint == self.fingerprint(keys_of=recorded)
                and not added_off_default(ExperimentConfig, self._trained(), recorded))

    def changed_since(self, recorded: dict) -> list[str]:
        """`key.path: then -> now` for what differs from a run's recorded config (output aside)."""
        return changed_since(ExperimentConfig, recorded, self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)
