"""A user-written member kind, used from a config as `custom_kinds:FocalWithCoverage`. Written as
the README shows: maths only, no device pinning, no loss scaling, no apply."""

from __future__ import annotations

from harness.core.backend import import_tf
from harness.members import Member, StepOutput, Update, gradients

tf = import_tf()


class FocalWithCoverage(Member):
    """A supervised member that also reports how much of each image it predicts as foreground."""

    metric_names = ("loss", "coverage")
    higher_is_better = frozenset({"coverage"})  # its own metric, declared: more foreground is better here

    def train_step(self, batch):
        with tf.GradientTape() as tape:
            predictions = self.model(batch.images, training=True)
            loss = batch.mean(self.loss_fn(batch.masks, predictions))
        coverage = tf.reduce_mean(tf.cast(predictions > 0.5, tf.float32))
        update = gradients(tape, loss, self.model.trainable_variables, self.optimizer)
        return StepOutput({"loss": loss, "coverage": coverage}, [update], predictions)


class BrokenStep(Member):
    """A kind with a bug of its user's in its step: it reads a metric the batch does not have."""

    def train_step(self, batch):
        return {"loss": batch.weights["loss"]}


class BrokenBuild(Member):
    """A kind whose build raises before any model exists."""

    @classmethod
    def build(cls, spec, data, seed, batchnorm_momentum, device, precision):
        raise RuntimeError(f"no pretrained weights for {spec.arch}")


class BranchesOnTensors(Member):
    """A user's step with Python control flow on tensors, as users write inside any tf.function:
    autograph must turn the `if` into a tf.cond (unconverted, graph mode refuses a tensor as a bool)."""

    metric_names = ("loss", "has_foreground")

    def train_step(self, batch):
        with tf.GradientTape() as tape:
            predictions = self.model(batch.images, training=True)
            loss = batch.mean(self.loss_fn(batch.masks, predictions))
        if tf.reduce_max(batch.masks) > 0.5:
            has_foreground = tf.constant(1.0)
        else:
            has_foreground = tf.constant(0.0)
        update = gradients(tape, loss, self.model.trainable_variables, self.optimizer)
        return StepOutput({"loss": loss, "has_foreground": has_foreground}, [update], predictions)


class ConstantOutput(Member):
    """A network stuck as a collapsed one is: it trains, but what validation scores is the same
    mask for every image."""

    def predict(self, images):
        return tf.zeros_like(self.model(images, training=False)) + 0.5


class CollapsesLate(Member):
    """A network that learns, then collapses: after step COLLAPSE_AFTER each step sets every weight
    to zero (with plain SGD, whose step is the learning rate times the gradient, a gradient of
    weight / rate), and its output is the same for every image. Its best validation state is from
    before the collapse."""

    COLLAPSE_AFTER = 8

    def train_step(self, batch):
        with tf.GradientTape() as tape:
            predictions = self.model(batch.images, training=True)
            loss = batch.mean(self.loss_fn(batch.masks, predictions))
        update = gradients(tape, loss, self.model.trainable_variables, self.optimizer)
        collapsing = batch.step > self.COLLAPSE_AFTER
        rate = tf.cast(self.optimizer.learning_rate, tf.float32)
        steps = [tf.where(collapsing, variable / rate, gradient) for gradient, variable in zip(update.gradients, update.variables)]
        return StepOutput({"loss": loss}, [Update(self.optimizer, steps, update.variables, loss)], predictions)
