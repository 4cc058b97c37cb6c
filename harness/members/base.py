"""A member is one thing the fused step trains: a model with its own optimizer, loss and status.

All state (model, optimizer slots, divergence flags) is created here, eagerly, before the step is
traced: the step then only reads and assigns existing variables. What one step computes is the
member's (`train_step`); how it is placed, fed and applied is the fused step's
(`harness.core.member_step`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from harness.config.naming import model_of
from harness.config.schema import DataSpec, ModelSpec, OptimizerSpec
from harness.core.backend import import_keras, import_tf
from harness.core.evaluation import segmentation_counts
from harness.core.scores import segmentation_scores
from harness.core.losses import make_loss
from harness.core.member_step import Batch, StepOutput, Update, gradients
from harness.core.schedules import WarmupSchedule
from harness.members import zoo

tf = import_tf()
keras = import_keras()
_FIRST_REPLICA = tf.VariableAggregation.ONLY_FIRST_REPLICA

__all__ = ["Batch", "Member", "StepOutput", "Update", "gradients"]


def member_seed(seed: int, name: str) -> int:
    """Initial weights depend only on (training seed, model name), not on the other members, so a
    model's run is the same alone or among others. A repeat's member (`unet@2`) is seeded as its
    model with that repeat's training seed: the same weights as `unet` in a run of that seed."""
    digest = hashlib.sha256(f"{seed}:{model_of(name)}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31 - 1)


def build_optimizer(spec: OptimizerSpec):
    """A tf_keras optimizer; with a schedule (durations already in steps), its learning rate is
    a function of the optimizer's update count."""
    rate: Any = spec.learning_rate
    if spec.schedule is not None and (spec.schedule.name != "constant" or spec.schedule.warmup_steps):
        s = spec.schedule
        rate = WarmupSchedule(spec.learning_rate, s.name, s.warmup_steps or 0, s.decay_steps or 1, s.floor, s.power, tuple(s.boundaries_steps or ()), tuple(s.factors))
    common: dict[str, Any] = {"learning_rate": rate}
    if spec.clipnorm is not None:
        common["clipnorm"] = spec.clipnorm
    if spec.name == "adam":
        return keras.optimizers.Adam(beta_1=spec.beta_1, **common)
    if spec.name == "adamw":
        return keras.optimizers.AdamW(weight_decay=spec.weight_decay or 0.004, beta_1=spec.beta_1, **common)
    if spec.name == "sgd":
        return keras.optimizers.SGD(momentum=spec.momentum, **common)
    return keras.optimizers.RMSprop(momentum=spec.momentum, **common)


@dataclass
class Member:
    """A member: what the fused step trains as one unit. This base class is the `supervised` kind:
    one model, one loss, one optimizer. Other kinds (GAN pairs, autoencoders, users' own) subclass
    it and change what they build, what one step computes, and what they report:

      build(...)          classmethod: create every model, optimizer and variable, eagerly
      train_step(batch)   graph code, maths only: losses, `gradients(...)`, metrics -> StepOutput
      metric_names        the keys of StepOutput.metrics (each becomes a `train` row of losses.csv)
      higher_is_better    which of its own metrics (not in config/metrics.py) go up when better
      predict(images)     what validation scores and samples.png shows
      eval_keys/eval_images/eval_scores   validation: per-image quantities, scores from their sums
      checkpoint_items()  every trackable object a checkpoint must hold
      exported_models()   the models written to models/<name>/<key>.keras

    The fused step applies the updates only if every loss and gradient is finite; otherwise the
    member is frozen as diverged from then on, so one exploding member never disturbs the others.
    """

    name: str
    spec: ModelSpec
    model: Any
    optimizer: Any
    loss_fn: Callable
    diverged: Any = field(repr=False)  # tf.Variable(bool)
    diverged_step: Any = field(repr=False)  # tf.Variable(int64), -1 while healthy
    device: str | None = None  # per_model placement: variables and compute pinned here
    isolate_divergence: bool = True  # train.isolate_divergence
    stream: int = 0  # which input stream feeds it: its repeat's (0-based), see data.pipeline
    # With members on different losses, validation also scores this one on the common loss
    # (a per-example loss function, set by the run): `compare_loss` beside its own `loss`.
    compare_loss_fn: Callable | None = None

    metric_names = ("loss",)
    # A kind's own metric the vocabulary does not know (a user's `coverage`) counts as lower-is-better
    # unless named here; the run records it (run.json models.<name>.higher_is_better) for its outputs.
    higher_is_better: ClassVar[frozenset[str]] = frozenset()
    task = "segmentation"  # or "reconstruction": what predict returns and validation scores
    # The validation scores `eval_scores` returns: early stopping and a race watch one of them.
    val_metrics: ClassVar[tuple[str, ...]] = ("loss", "iou", "f1")

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def training_loss(cls, spec: ModelSpec, data: DataSpec) -> Callable:
        """The per-example loss its step trains on: the config's `loss` (an autoencoder: MSE)."""
        return make_loss(spec.loss, ignore=data.ignore_label is not None)

    @classmethod
    def build(cls, spec: ModelSpec, data: DataSpec, seed: int, batchnorm_momentum, device, precision) -> "Member":
        keras.utils.set_random_seed(member_seed(seed, spec.name))
        model = build_network(spec.arch, spec.backbone, spec.options, data, spec.weights, batchnorm_momentum, cls.task)
        return cls(
            name=spec.name,
            spec=spec,
            model=model,
            optimizer=make_optimizer(spec.optimizer, model, precision),
            loss_fn=cls.training_loss(spec, data),
            **divergence_flags(spec.name),
            device=device,
        )

    @property
    def params(self) -> int:
        """The served network's: what model.keras holds, as FLOPs, latency and model_mb are of
        it (a GAN's generator; its discriminator trains beside it and is never served)."""
        return int(self.model.count_params())

    @property
    def trained_params(self) -> int:
        """Every network the step trains (a GAN's generator and discriminator): run.json's."""
        return sum(int(m.count_params()) for m in self.exported_models().values())

    # -- one step: maths only -------------------------------------------------------------------

    def train_step(self, batch: Batch) -> StepOutput:
        with tf.GradientTape() as tape:
            predictions = self.model(batch.images, training=True)
            loss = batch.mean(self.loss_fn(batch.masks, predictions))
        update = gradients(tape, loss, self.model.trainable_variables, self.optimizer)
        return StepOutput({"loss": loss}, [update], predictions)

    # -- validation -----------------------------------------------------------------------------

    def predict(self, images):
        return self.model(images, training=False)

    def eval_keys(self, classes: int) -> tuple[str, ...]:
        """The per-image quantities `eval_images` returns."""
        return ("loss", "intersection", "predicted", "truth", *(("compare_loss",) if self.compare_loss_fn else ()))

    def eval_images(self, images, masks, classes: int) -> dict:
        """Graph code, per image of the batch: loss, and per class intersection, predicted and
        true pixels. Summed over images they give the scores (`eval_scores`)."""
        probabilities = tf.cast(self.predict(images), tf.float32)
        counts = segmentation_counts(self.loss_fn(masks, probabilities), probabilities, masks, classes)
        if self.compare_loss_fn is not None:
            counts["compare_loss"] = self.compare_loss_fn(masks, probabilities)
        return counts

    def eval_scores(self, totals: dict, examples) -> dict:
        """numpy: scores from per-image quantities summed over any set of images."""
        return segmentation_scores(totals, examples)

    # -- state ----------------------------------------------------------------------------------

    def checkpoint_items(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer, "flags": Flags(self.diverged, self.diverged_step)}

    def exported_models(self) -> dict[str, Any]:
        return {"model": self.model}

    def state_variables(self) -> list:
        """Every variable a step may change: what a probe snapshots and a checkpoint saves."""
        variables = []
        for item in self.checkpoint_items().values():
            variables += list(item.variables) if hasattr(item, "variables") else []
        return variables


class preserved_state:
    """Run trial steps of a member (timing probe, XLA check), then put every variable it may have
    changed back exactly as it was."""

    def __init__(self, member: Member):
        self.member = member

    def __enter__(self):
        self.snapshot = [v.numpy() for v in self.member.state_variables()]
        return self.member

    def __exit__(self, *exc):
        for variable, value in zip(self.member.state_variables(), self.snapshot):
            variable.assign(value)


class Flags(tf.Module):
    """A member's divergence flags, as one trackable object for its checkpoint."""

    def __init__(self, diverged, diverged_step):
        super().__init__()
        self.diverged = diverged
        self.diverged_step = diverged_step


def divergence_flags(name: str) -> dict[str, Any]:
    # Replicas compute the same value (after the all-reduce): any replica may write it.
    return {
        "diverged": tf.Variable(False, trainable=False, name=f"{name}_diverged", aggregation=_FIRST_REPLICA),
        "diverged_step": tf.Variable(tf.constant(-1, tf.int64), trainable=False, name=f"{name}_diverged_step", aggregation=_FIRST_REPLICA),
    }


def make_optimizer(spec: OptimizerSpec, model, precision: str):
    optimizer = build_optimizer(spec)
    if precision == "mixed_float16":
        # One loss scale per model: one model's overflow skips only its own update.
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)  # slots exist before tracing, and before restore
    return optimizer


def build_network(arch, backbone, options, data: DataSpec, weights, batchnorm_momentum, task: str = "segmentation"):
    input_shape = data.input_shape
    if task == "reconstruction":
        model = zoo.build_model(arch, backbone, options, input_shape, data.channels, weights, activation="sigmoid")
    else:
        model = zoo.build_model(arch, backbone, options, input_shape, data.classes, weights)
    if batchnorm_momentum is not None:
        set_batchnorm_momentum(model, batchnorm_momentum)
    return model


def set_batchnorm_momentum(model, momentum: float) -> int:
    """Set the momentum of every BatchNormalization layer, nested models included; return how many.
    It is read when the layer is called, so setting it before the step is traced is enough."""
    count = 0
    for layer in model.submodules:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = momentum
            count += 1
    return count
