"""Member kinds beyond one model + one loss: a conditional GAN pair and an autoencoder.

A kind is a subclass of `harness.members.Member`. It says what it builds (`build`), what one step
computes (`train_step`: maths only, returning a StepOutput), what it reports (`metric_names`, and
the validation hooks) and what a checkpoint and an export hold. Users' own kinds are resolved by
`harness.members.registry`. See the README ("Your own member kind").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from typing import Any

from harness.core.backend import import_keras, import_tf
from harness.config.schema import DataSpec, ModelSpec
from harness.core.losses import make_loss
from harness.core.member_step import Batch, StepOutput, gradients, on_device
from harness.members.base import Flags, Member, build_network, divergence_flags, make_optimizer, member_seed

tf = import_tf()
keras = import_keras()


@dataclass
class GanMember(Member):
    """pix2pix-style conditional GAN: the generator (`arch`) maps an image to a mask; the
    discriminator judges (image, mask) pairs patch by patch. Two tapes, two optimizers, one
    apply-or-skip decision. Generator loss = adversarial + l1_lambda x L1. Validation scores the
    generator's mask like any segmentation model."""

    discriminator: Any = None
    d_optimizer: Any = None
    d_device: str | None = None

    metric_names = ("loss", "adv", "l1", "disc_loss")

    @classmethod
    def build(cls, spec: ModelSpec, data: DataSpec, seed, batchnorm_momentum, device, precision) -> "GanMember":
        keras.utils.set_random_seed(member_seed(seed, spec.name))
        generator = build_network(spec.arch, spec.backbone, spec.options, data, spec.weights, batchnorm_momentum)
        d_device = device if spec.gan.discriminator_device == "same" else _next_device(device)
        with on_device(d_device):
            discriminator = build_network(spec.gan.discriminator, None, spec.gan.discriminator_options, data, None, batchnorm_momentum)
            d_optimizer = make_optimizer(spec.gan.discriminator_optimizer, discriminator, precision)
        return cls(
            name=spec.name, spec=spec, model=generator,
            optimizer=make_optimizer(spec.optimizer, generator, precision),
            loss_fn=make_loss(spec.loss), **divergence_flags(spec.name), device=device,
            discriminator=discriminator, d_optimizer=d_optimizer, d_device=d_device,
        )

    def train_step(self, batch: Batch) -> StepOutput:
        bce = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
        images, masks = batch.images, batch.masks
        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
            fake = tf.cast(self.model(images, training=True), tf.float32)
            with on_device(self.d_device):  # `discriminator_device: next` puts it on its own device
                real_logits = self.discriminator(tf.concat([images, masks], -1), training=True)
                fake_logits = self.discriminator(tf.concat([images, fake], -1), training=True)
            per_example = lambda x: tf.reduce_mean(x, axis=list(range(1, len(x.shape))))  # noqa: E731
            adv = batch.mean(per_example(bce(tf.ones_like(fake_logits), fake_logits)[..., None]))
            l1 = batch.mean(per_example(tf.abs(masks - fake)))
            g_loss = adv + self.spec.gan.l1_lambda * l1
            d_real = per_example(bce(tf.ones_like(real_logits), real_logits)[..., None])
            d_fake = per_example(bce(tf.zeros_like(fake_logits), fake_logits)[..., None])
            d_loss = 0.5 * batch.mean(d_real + d_fake)
        updates = [
            gradients(g_tape, g_loss, self.model.trainable_variables, self.optimizer),
            gradients(d_tape, d_loss, self.discriminator.trainable_variables, self.d_optimizer),
        ]
        return StepOutput({"loss": g_loss, "adv": adv, "l1": l1, "disc_loss": d_loss}, updates, fake)

    def checkpoint_items(self) -> dict[str, Any]:
        return {
            "model": self.model, "optimizer": self.optimizer,
            "discriminator": self.discriminator, "discriminator_optimizer": self.d_optimizer,
            "flags": Flags(self.diverged, self.diverged_step),
        }

    def exported_models(self) -> dict[str, Any]:
        return {"model": self.model, "discriminator": self.discriminator}


def _next_device(device: str | None) -> str | None:
    """The device after `device` among those of its type (wrapping), for a discriminator pinned apart."""
    if device is None:
        return None
    kind = "GPU" if "gpu" in device.lower() else "CPU"
    names = [d.name for d in tf.config.list_logical_devices(kind)]
    matches = [i for i, n in enumerate(names) if n.lower().endswith(device.lower().split("/")[-1].replace("device:", ""))]
    return names[(matches[0] + 1) % len(names)] if matches else device


@dataclass
class AutoencoderMember(Member):
    """Reconstructs its input; the masks are ignored. Scored by reconstruction loss
    (mean squared error) in training and validation."""

    task = "reconstruction"
    val_metrics = ("loss",)

    @classmethod
    def training_loss(cls, spec, data):
        return _mse_per_example  # spec.loss is "mse" (or, in an older run's config.yaml, a mask loss it never read)

    def train_step(self, batch: Batch) -> StepOutput:
        return super().train_step(batch.with_masks(batch.images))

    def eval_keys(self, classes: int) -> tuple[str, ...]:
        return ("loss",)

    def eval_images(self, images, masks, classes: int) -> dict:
        return {"loss": self.loss_fn(images, tf.cast(self.predict(images), tf.float32))}

    def eval_scores(self, totals: dict, examples) -> dict:
        return {"loss": np.asarray(totals["loss"], np.float64) / examples}


def _mse_per_example(target, prediction):
    return tf.reduce_mean(tf.square(tf.cast(target, tf.float32) - tf.cast(prediction, tf.float32)), axis=[1, 2, 3])
