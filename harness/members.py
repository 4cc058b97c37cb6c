"""A member is one thing the fused step trains: a model with its own optimizer, loss and status.

All state (model, optimizer slots, divergence flags) is created here, eagerly, before the step is
traced: the step then only reads and assigns existing variables.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

from . import zoo
from .backend import import_keras, import_tf
from .config import DataSpec, ExperimentConfig, ModelSpec, OptimizerSpec
from .losses import make_loss

tf = import_tf()
keras = import_keras()
_FIRST_REPLICA = tf.VariableAggregation.ONLY_FIRST_REPLICA


class _Opaque:
    """Carries updates through merge_call untouched: the strategy must not unwrap mirrored
    variables into per-device components, the optimizers expect them whole."""

    def __init__(self, value):
        self.value = value


def member_seed(seed: int, name: str) -> int:
    """Initial weights depend only on (experiment seed, model name), not on the other members, so a
    model's run is the same alone or among others."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31 - 1)


def build_optimizer(spec: OptimizerSpec):
    common: dict[str, Any] = {"learning_rate": spec.learning_rate}
    if spec.clipnorm is not None:
        common["clipnorm"] = spec.clipnorm
    if spec.name == "adam":
        return keras.optimizers.Adam(beta_1=spec.beta_1, **common)
    if spec.name == "adamw":
        return keras.optimizers.AdamW(weight_decay=spec.weight_decay or 0.004, beta_1=spec.beta_1, **common)
    if spec.name == "sgd":
        return keras.optimizers.SGD(momentum=spec.momentum, **common)
    return keras.optimizers.RMSprop(momentum=spec.momentum, **common)


@dataclass(frozen=True)
class Update:
    """One optimizer's share of a member's step: the gradients for its variables."""

    optimizer: Any
    gradients: list
    variables: list


@dataclass
class Member:
    """A member: what the fused step trains as one unit. This base class is the `supervised` kind:
    one model, one loss, one optimizer. Other kinds (GAN pairs, autoencoders, users' own) subclass
    it and change what they build, what one step computes, and what they report:

      build(...)          classmethod: create every model, optimizer and variable, eagerly
      train_step(...)     graph code: the member's fragment of the fused step; returns its metrics
      metric_names        the keys train_step returns (each becomes a `train` row of losses.csv)
      predict(images)     what validation scores and samples.png shows
      eval_zeros/eval_batch/eval_scores   validation: sums per batch, then scores
      checkpoint_items()  every trackable object a checkpoint must hold
      exported_models()   the models written to models/<name>/<key>.keras

    An update whose loss or gradients are not finite is skipped, and the member is marked diverged
    from then on, so one exploding member never disturbs the others.
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

    metric_names = ("loss",)
    task = "segmentation"  # or "reconstruction": what predict returns and validation scores

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def build(cls, spec: ModelSpec, data: DataSpec, seed: int, batchnorm_momentum, device, precision) -> "Member":
        keras.utils.set_random_seed(member_seed(seed, spec.name))
        model = build_network(spec.arch, spec.backbone, spec.options, data, spec.weights, batchnorm_momentum, cls.task)
        return cls(
            name=spec.name,
            spec=spec,
            model=model,
            optimizer=make_optimizer(spec.optimizer, model, precision),
            loss_fn=make_loss(spec.loss),
            **divergence_flags(spec.name),
            device=device,
        )

    @property
    def params(self) -> int:
        return sum(int(m.count_params()) for m in self.exported_models().values())

    # -- one step -------------------------------------------------------------------------------

    def train_step(self, images, masks, global_batch: int, step):
        with _maybe_device(self.device):
            images, masks = self.local(images, masks)
            with tf.GradientTape() as tape:
                predictions = self.model(images, training=True)
                loss = tf.reduce_sum(self.loss_fn(masks, predictions)) / global_batch
                scaled = scale_loss(self.optimizer, loss)
            gradients = unscale(self.optimizer, tape.gradient(scaled, self.model.trainable_variables))
            self.apply_if_finite([loss], [Update(self.optimizer, gradients, self.model.trainable_variables)], step)
        return {"loss": loss}

    def local(self, *tensors):
        """The batch lives on the input pipeline's device; a pinned member copies it once, here, so
        every op of its step reads a local tensor (as on a single device: bitwise the same)."""
        return tuple(tf.identity(t) for t in tensors) if self.device else tensors

    def apply_if_finite(self, losses: list, updates: list[Update], step) -> None:
        """Apply every update only if all losses and gradients are finite and the member is healthy.

        Under several replicas the gradients (and losses) are summed across them first, so every
        replica takes the same decision. A sync point inside control flow is not supported in
        replica context, so, as Keras's LossScaleOptimizer does, the cond runs in cross-replica
        context (merge_call) and re-enters the replicas to apply.
        """
        if not self.isolate_divergence:  # the user chose speed: apply as a plain loop would
            _apply(_Opaque(updates), aggregate=True)
            return
        context = tf.distribute.get_replica_context()
        replicated = context is not None and context.num_replicas_in_sync > 1
        if replicated:
            updates = [Update(u.optimizer, context.all_reduce(tf.distribute.ReduceOp.SUM, u.gradients), u.variables) for u in updates]
            losses = context.all_reduce(tf.distribute.ReduceOp.SUM, losses)
        finite = all_finite(losses, [g for u in updates if not _loss_scaled(u.optimizer) for g in u.gradients])
        healthy = tf.logical_and(finite, tf.logical_not(self.diverged))
        opaque = _Opaque(updates)

        if not replicated:
            tf.cond(healthy, lambda: _apply(opaque, aggregate=True), lambda: tf.constant(False))
        elif tf.__internal__.distribute.strategy_supports_no_merge_call():
            tf.cond(healthy, lambda: _apply(opaque), lambda: tf.constant(False))
        else:
            context.merge_call(_apply_cross_replica, args=(healthy, opaque))
        newly_diverged = tf.logical_and(tf.logical_not(finite), tf.logical_not(self.diverged))
        self.diverged_step.assign(tf.where(newly_diverged, tf.cast(step, tf.int64), self.diverged_step))
        self.diverged.assign(tf.logical_or(self.diverged, tf.logical_not(finite)))

    # -- validation -----------------------------------------------------------------------------

    def predict(self, images):
        with _maybe_device(self.device):
            return self.model(images, training=False)

    def eval_zeros(self, classes: int):
        zeros = tf.zeros([max(classes - 1, 1)])
        return (tf.constant(0.0), zeros, zeros, zeros)

    def eval_batch(self, images, masks, classes: int):
        """Sums over one batch: loss, and per class intersection, predicted and true pixels."""
        from .step import segmentation_counts

        probabilities = tf.cast(self.predict(images), tf.float32)
        return segmentation_counts(tf.reduce_sum(self.loss_fn(masks, probabilities)), probabilities, masks, classes)

    def eval_scores(self, totals, examples):
        from .step import segmentation_scores

        return segmentation_scores(totals, examples)

    # -- state ----------------------------------------------------------------------------------

    def checkpoint_items(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer, "flags": _Flags(self.diverged, self.diverged_step)}

    def exported_models(self) -> dict[str, Any]:
        return {"model": self.model}

    def state_variables(self) -> list:
        """Every variable a step may change: what a probe snapshots and a checkpoint saves."""
        variables = []
        for item in self.checkpoint_items().values():
            variables += list(item.variables) if hasattr(item, "variables") else []
        return variables


def all_finite(losses: list, gradients: list):
    """True if every loss and every gradient element is finite.

    NaN and Inf propagate through a sum, so one sum per tensor and a single is_finite on their
    total decide it: about half the ops of an is_finite + reduce_all per tensor, which costs ~5% of
    a small model's step. (A total beyond float32's range, ~3e38, also counts as not finite: such
    gradients have exploded anyway.) Under float16 the loss scaler skips overflowing gradients
    itself, so the caller leaves them out.
    """
    terms = [tf.cast(loss, tf.float32) for loss in losses] + [tf.reduce_sum(tf.cast(g, tf.float32)) for g in gradients]
    return tf.math.is_finite(tf.add_n(terms))


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


class _Flags(tf.Module):
    def __init__(self, diverged, diverged_step):
        super().__init__()
        self.diverged = diverged
        self.diverged_step = diverged_step


def _loss_scaled(optimizer) -> bool:
    return isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)


def scale_loss(optimizer, loss):
    return optimizer.get_scaled_loss(loss) if _loss_scaled(optimizer) else loss


def unscale(optimizer, gradients):
    return optimizer.get_unscaled_gradients(gradients) if _loss_scaled(optimizer) else gradients


def _apply(updates: "_Opaque", aggregate: bool = False):
    for u in updates.value:
        pairs = list(zip(u.gradients, u.variables))
        if aggregate:
            u.optimizer.apply_gradients(pairs)
        else:  # already summed across replicas in apply_if_finite
            u.optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)
    return tf.constant(True)


def _apply_cross_replica(distribution, healthy, updates):
    decision = distribution.experimental_local_results(healthy)[0]

    def apply():
        distribution.extended.call_for_each_replica(_apply, args=(updates,))
        return tf.constant(True)

    tf.cond(decision, apply, lambda: tf.constant(False))


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
    input_shape = (*data.image_size, data.channels)
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


def _maybe_device(device: str | None):
    import contextlib

    return tf.device(device) if device else contextlib.nullcontext()


def build_member(
    spec: ModelSpec,
    data: DataSpec,
    seed: int,
    batchnorm_momentum: float | None = None,
    device: str | None = None,
    precision: str = "float32",
) -> Member:
    from .kinds import member_class

    with _maybe_device(device):
        return member_class(spec.kind).build(spec, data, seed, batchnorm_momentum, device, precision)


def build_members(config: ExperimentConfig, model_devices: dict[str, str | None] | None = None) -> list[Member]:
    devices = model_devices or {}
    members = [
        build_member(
            spec, config.data, config.seed, config.train.batchnorm_momentum, devices.get(spec.name), config.placement.precision
        )
        for spec in config.member_specs()
    ]
    for member in members:
        member.isolate_divergence = config.train.isolate_divergence
    return members
