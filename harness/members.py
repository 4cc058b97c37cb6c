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

    metric_names = ("loss",)

    @property
    def params(self) -> int:
        return int(self.model.count_params())

    def train_step(self, images, masks, global_batch: int, step):
        with tf.GradientTape() as tape:
            predictions = self.model(images, training=True)
            loss = tf.reduce_sum(self.loss_fn(masks, predictions)) / global_batch
        gradients = tape.gradient(loss, self.model.trainable_variables)
        self.apply_if_finite(loss, gradients, self.model.trainable_variables, step)
        return {"loss": loss}

    def apply_if_finite(self, loss, gradients, variables, step) -> None:
        finite = tf.reduce_all([tf.math.is_finite(loss)] + [tf.reduce_all(tf.math.is_finite(g)) for g in gradients])
        healthy = tf.logical_and(finite, tf.logical_not(self.diverged))

        def apply():
            self.optimizer.apply_gradients(zip(gradients, variables))
            return tf.constant(True)

        tf.cond(healthy, apply, lambda: tf.constant(False))
        newly_diverged = tf.logical_and(tf.logical_not(finite), tf.logical_not(self.diverged))
        self.diverged_step.assign(tf.where(newly_diverged, tf.cast(step, tf.int64), self.diverged_step))
        self.diverged.assign(tf.logical_or(self.diverged, tf.logical_not(finite)))

    def predict(self, images):
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


def build_member(spec: ModelSpec, data: DataSpec, seed: int, batchnorm_momentum: float | None = None) -> Member:
    keras.utils.set_random_seed(member_seed(seed, spec.name))
    input_shape = (*data.image_size, data.channels)
    model = zoo.build_model(spec.arch, spec.backbone, spec.options, input_shape, data.classes, spec.weights)
    if batchnorm_momentum is not None:
        set_batchnorm_momentum(model, batchnorm_momentum)
    optimizer = build_optimizer(spec.optimizer)
    optimizer.build(model.trainable_variables)  # slots exist before tracing, and before restore
    return Member(
        name=spec.name,
        spec=spec,
        model=model,
        optimizer=optimizer,
        loss_fn=make_loss(spec.loss),
        diverged=tf.Variable(False, trainable=False, name=f"{spec.name}_diverged"),
        diverged_step=tf.Variable(tf.constant(-1, tf.int64), trainable=False, name=f"{spec.name}_diverged_step"),
    )


def build_members(config: ExperimentConfig) -> list[Member]:
    momentum = config.train.batchnorm_momentum
    return [build_member(spec, config.data, config.seed, momentum) for spec in config.models]
