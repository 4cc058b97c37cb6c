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
    """Carries variables through merge_call untouched: the strategy must not unwrap mirrored
    variables into per-device components, the optimizer expects them whole."""

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
        return keras.optimizers.Adam(**common)
    if spec.name == "adamw":
        return keras.optimizers.AdamW(weight_decay=spec.weight_decay or 0.004, **common)
    if spec.name == "sgd":
        return keras.optimizers.SGD(momentum=spec.momentum, **common)
    return keras.optimizers.RMSprop(momentum=spec.momentum, **common)


@dataclass
class Member:
    """A supervised member: one model, one loss, one optimizer.

    `train_step` is the member's fragment of the fused step (graph code: tensors in, tensors out).
    An update whose loss or gradients are not finite is skipped, and the member is marked diverged
    from then on, so one exploding model never disturbs the others.
    """

    name: str
    spec: ModelSpec
    model: Any
    optimizer: Any
    loss_fn: Callable
    diverged: Any = field(repr=False)  # tf.Variable(bool)
    diverged_step: Any = field(repr=False)  # tf.Variable(int64), -1 while healthy
    device: str | None = None  # per_model placement: variables and compute pinned here

    metric_names = ("loss",)

    @property
    def params(self) -> int:
        return int(self.model.count_params())

    @property
    def loss_scaled(self) -> bool:
        return isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer)

    def train_step(self, images, masks, global_batch: int, step):
        with _maybe_device(self.device):
            if self.device:
                # The batch lives on the input pipeline's device; copy it once, here, so every op
                # of this member's step reads a local tensor (as on a single device).
                images, masks = tf.identity(images), tf.identity(masks)
            with tf.GradientTape() as tape:
                predictions = self.model(images, training=True)
                loss = tf.reduce_sum(self.loss_fn(masks, predictions)) / global_batch
                scaled = self.optimizer.get_scaled_loss(loss) if self.loss_scaled else loss
            gradients = tape.gradient(scaled, self.model.trainable_variables)
            if self.loss_scaled:
                gradients = self.optimizer.get_unscaled_gradients(gradients)
            self.apply_if_finite(loss, gradients, self.model.trainable_variables, step)
        return {"loss": loss}

    def apply_if_finite(self, loss, gradients, variables, step) -> None:
        """Apply the update only if loss and gradients are finite and the member is healthy.

        Under several replicas the gradients (and loss) are summed across them first, so every
        replica takes the same decision. A sync point inside control flow is not supported in
        replica context, so, as Keras's LossScaleOptimizer does, the cond runs in cross-replica
        context (merge_call) and re-enters the replicas to apply.
        """
        context = tf.distribute.get_replica_context()
        replicated = context is not None and context.num_replicas_in_sync > 1
        if replicated:
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
            loss = context.all_reduce(tf.distribute.ReduceOp.SUM, loss)
        checks = [tf.math.is_finite(loss)]
        if not self.loss_scaled:  # under float16 the loss scaler skips overflowing gradients itself
            checks += [tf.reduce_all(tf.math.is_finite(g)) for g in gradients]
        finite = tf.reduce_all(checks)
        healthy = tf.logical_and(finite, tf.logical_not(self.diverged))

        if not replicated:
            tf.cond(healthy, lambda: self._apply(gradients, _Opaque(variables), aggregate=True), lambda: tf.constant(False))
        elif tf.__internal__.distribute.strategy_supports_no_merge_call():
            tf.cond(healthy, lambda: self._apply(gradients, _Opaque(variables)), lambda: tf.constant(False))
        else:
            context.merge_call(self._apply_cross_replica, args=(healthy, gradients, _Opaque(variables)))
        newly_diverged = tf.logical_and(tf.logical_not(finite), tf.logical_not(self.diverged))
        self.diverged_step.assign(tf.where(newly_diverged, tf.cast(step, tf.int64), self.diverged_step))
        self.diverged.assign(tf.logical_or(self.diverged, tf.logical_not(finite)))

    def _apply(self, gradients, variables: "_Opaque", aggregate: bool = False):
        pairs = list(zip(gradients, variables.value))
        if aggregate:
            self.optimizer.apply_gradients(pairs)
        else:  # already summed across replicas in apply_if_finite
            self.optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)
        return tf.constant(True)

    def _apply_cross_replica(self, distribution, healthy, gradients, variables):
        decision = distribution.experimental_local_results(healthy)[0]

        def apply():
            distribution.extended.call_for_each_replica(self._apply, args=(gradients, variables))
            return tf.constant(True)

        tf.cond(decision, apply, lambda: tf.constant(False))

    def predict(self, images):
        with _maybe_device(self.device):
            return self.model(images, training=False)

    def state_variables(self) -> list:
        """Every variable a step may change: what a probe snapshots and a checkpoint saves."""
        return list(self.model.variables) + list(self.optimizer.variables) + [self.diverged, self.diverged_step]


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
    with _maybe_device(device):
        return _build_member(spec, data, seed, batchnorm_momentum, device, precision)


def _build_member(spec, data, seed, batchnorm_momentum, device, precision) -> Member:
    keras.utils.set_random_seed(member_seed(seed, spec.name))
    input_shape = (*data.image_size, data.channels)
    model = zoo.build_model(spec.arch, spec.backbone, spec.options, input_shape, data.classes, spec.weights)
    if batchnorm_momentum is not None:
        set_batchnorm_momentum(model, batchnorm_momentum)
    optimizer = build_optimizer(spec.optimizer)
    if precision == "mixed_float16":
        # One loss scale per model: one model's overflow skips only its own update.
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)  # slots exist before tracing, and before restore
    return Member(
        name=spec.name,
        spec=spec,
        model=model,
        optimizer=optimizer,
        loss_fn=make_loss(spec.loss),
        # Replicas compute the same value (after the all-reduce): any replica may write it.
        diverged=tf.Variable(False, trainable=False, name=f"{spec.name}_diverged", aggregation=_FIRST_REPLICA),
        diverged_step=tf.Variable(
            tf.constant(-1, tf.int64), trainable=False, name=f"{spec.name}_diverged_step", aggregation=_FIRST_REPLICA
        ),
        device=device,
    )


def build_members(config: ExperimentConfig, model_devices: dict[str, str | None] | None = None) -> list[Member]:
    devices = model_devices or {}
    return [
        build_member(
            spec, config.data, config.seed, config.train.batchnorm_momentum, devices.get(spec.name), config.placement.precision
        )
        for spec in config.member_specs()
    ]
