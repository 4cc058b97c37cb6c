"""A user-written member kind, used from a config as `custom_kinds:FocalWithCoverage`."""

from __future__ import annotations

from harness.backend import import_tf
from harness.members import Member, Update, _maybe_device

tf = import_tf()


class FocalWithCoverage(Member):
    """A supervised member that also reports how much of each image it predicts as foreground."""

    metric_names = ("loss", "coverage")

    def train_step(self, images, masks, global_batch, step):
        with _maybe_device(self.device):
            with tf.GradientTape() as tape:
                predictions = self.model(images, training=True)
                loss = tf.reduce_sum(self.loss_fn(masks, predictions)) / global_batch
            gradients = tape.gradient(loss, self.model.trainable_variables)
            self.apply_if_finite([loss], [Update(self.optimizer, gradients, self.model.trainable_variables)], step)
            coverage = tf.reduce_mean(tf.cast(predictions > 0.5, tf.float32))
        return {"loss": loss, "coverage": coverage}
