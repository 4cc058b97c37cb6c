"""A plain one-model training loop, written the way seed 003 writes it: one tf.function with one
GradientTape and one optimizer. It is the ground truth "trained alone" that the fused step must
reproduce bit for bit."""

from __future__ import annotations

from harness.core.backend import import_keras, import_tf
from harness.config.schema import ExperimentConfig
from harness.data.pipeline import make_synthetic_example_fn, make_train_dataset
from harness.core.losses import make_loss
from harness.members.base import build_optimizer, member_seed
from harness.members.zoo import build_model

tf = import_tf()
keras = import_keras()


def train_alone(config: ExperimentConfig, name: str, steps: int | None = None):
    """Train model `name` of `config` by itself; return (per-step losses, final weights)."""
    spec = next(m for m in config.models if m.name == name)
    data = config.data
    keras.utils.set_random_seed(member_seed(config.seed, spec.name))
    model = build_model(spec.arch, spec.backbone, spec.options, (*data.image_size, data.channels), data.classes)
    optimizer = build_optimizer(spec.optimizer)
    loss_fn = make_loss(spec.loss)

    @tf.function
    def train(images, masks):
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = tf.reduce_mean(loss_fn(masks, predictions))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    total = steps or config.total_steps
    batches = make_train_dataset(make_synthetic_example_fn(data, data.seed), data, config.seed, 0, total)
    losses = [float(train(images, masks).numpy()) for images, masks in batches]
    return losses, [w.copy() for w in model.get_weights()]
