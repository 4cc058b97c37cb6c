"""Validation: one compiled function that runs every member over the whole validation set and
returns, per member, what each image contributes (`eval_images`): for segmentation, its loss and
its per-class intersection, predicted and true pixel counts (background excluded for multi-class
tasks). They come back in the one host sync of the evaluation.

Scores are then a function of summed counts (`core.scores.segmentation_scores`, numpy): over all images they
are the validation scores; over one image, that image's scores (val_scores.csv); over a bootstrap
resample of the images, the resample's scores. One function, so the three always agree.
"""

from __future__ import annotations

from harness.core.backend import import_tf
from harness.core.losses import labelled_pixels
from harness.core.member_step import graph_method, on_device

tf = import_tf()


def make_eval_fn(members, classes: int, switches: dict | None = None):
    """One tf.function: {member: {quantity: tensor[N, ...]}}, one row per validation image.

    `switches` (member name -> the boolean variable of its switch in the fused step): a member
    switched off runs none of its ops and its quantities come back empty (N = 0), so members leave
    validation as they leave the step, without a new trace (see `_switched_eval`)."""

    # Graph code as written, as the train step's (see step.py): the loop written out, traced
    # without autograph, took 0.13 s less of smoke's first validation (0.80 s against 0.94 s,
    # medians of 4 alternating runs), the same ops.
    @tf.function(autograph=False)
    def evaluate(dataset):
        arrays = {
            m.name: {key: tf.TensorArray(tf.float32, size=0, dynamic_size=True, infer_shape=False) for key in m.eval_keys(classes)}
            for m in members
        }
        # A while loop over the dataset's iterator, not `dataset.reduce` (what autograph makes of
        # `for batch in dataset`), whose body runs on tf.data's threads without the graph optimizer
        # (smoke's validation: 150 ms per pass that way, 11 ms this way, the same values).
        iterator = iter(dataset)

        def body(batch, i, arrays):
            images, masks = batch.get_value()
            return iterator.get_next_as_optional(), i + 1, _write_batch(arrays, members, images, masks, classes, i, switches)

        _, _, arrays = tf.while_loop(lambda batch, i, arrays: batch.has_value(), body, (iterator.get_next_as_optional(), tf.constant(0), arrays))
        return {name: {key: array.concat() for key, array in per_key.items()} for name, per_key in arrays.items()}

    return evaluate


def _write_batch(arrays, members, images, masks, classes: int, i, switches: dict | None):
    written = {}
    for m in members:
        with on_device(m.device):
            values = _switched_eval(m, images, masks, classes, switches[m.name]) if switches else graph_method(m, "eval_images")(images, masks, classes)
        written[m.name] = {key: array.write(i, tf.cast(values[key], tf.float32)) for key, array in arrays[m.name].items()}
    return written


def _switched_eval(member, images, masks, classes: int, switch):
    """The member's per-image quantities behind its switch: on, exactly what it computes without
    one (its ops in a branch of their own); off, an empty tensor per quantity. The branches'
    shapes differ ([B, ...] against [0]), which tf.cond allows: the result's shape is left open,
    and the TensorArrays take elements of any shape."""

    def on():
        return {k: tf.cast(v, tf.float32) for k, v in graph_method(member, "eval_images")(images, masks, classes).items()}

    def off():
        return {k: tf.zeros([0], tf.float32) for k in member.eval_keys(classes)}

    return tf.cond(switch, on, off)


def segmentation_counts(per_example_loss, probabilities, masks, classes: int) -> dict:
    """Per image: loss [B], and per class intersection, predicted and true pixels [B, C']."""
    predicted, truth = _hard_labels(probabilities, masks, classes)
    return {
        "loss": per_example_loss,
        "intersection": tf.reduce_sum(predicted * truth, axis=[1, 2]),
        "predicted": tf.reduce_sum(predicted, axis=[1, 2]),
        "truth": tf.reduce_sum(truth, axis=[1, 2]),
    }


def _hard_labels(probabilities, masks, classes: int):
    """Predicted and true pixels per class, each pixel ignored by `data.ignore_label` (no class in
    its target: data/pipeline.py) counted in neither. Without such pixels the labelled-pixel factor
    is 1 everywhere and the counts are what they always were, to the bit."""
    masks = tf.cast(masks, tf.float32)
    labelled = labelled_pixels(tf, masks)
    if classes == 1:
        return tf.cast(probabilities > 0.5, tf.float32) * labelled, tf.nn.relu(masks)
    predicted = tf.one_hot(tf.argmax(probabilities, axis=-1), classes, dtype=tf.float32) * labelled
    return predicted[..., 1:], masks[..., 1:]
