"""Validation: one compiled function that scores every member over the whole validation set.

Each member says what it sums per batch (`eval_batch`, from `eval_zeros`) and how the sums
become scores (`eval_scores`); for segmentation: mean loss, IoU and F1 (dice) of the thresholded
(binary) or argmax (multi-class) prediction, from intersection and union counts summed over the
whole set, background excluded for multi-class tasks. Each member runs on its own device.
"""

from __future__ import annotations

from harness.core.backend import import_tf
from harness.core.member_step import on_device

tf = import_tf()


def make_eval_fn(members, classes: int):
    """One tf.function: {member: {metric: scalar}} over the whole validation set."""

    def batch_counts(images, masks):
        counts = {m.name: _on_device_eval(m, images, masks, classes) for m in members}
        return counts, tf.cast(tf.shape(images)[0], tf.float32)

    @tf.function
    def evaluate(dataset):
        totals = {m.name: m.eval_zeros(classes) for m in members}
        examples = tf.constant(0.0)
        for images, masks in dataset:
            counts, n = batch_counts(images, masks)
            totals = tf.nest.map_structure(tf.add, totals, counts)
            examples += n
        return {m.name: m.eval_scores(totals[m.name], examples) for m in members}

    return evaluate


def _on_device_eval(member, images, masks, classes: int):
    with on_device(member.device):
        return member.eval_batch(images, masks, classes)


def segmentation_counts(loss_sum, probabilities, masks, classes: int):
    predicted, truth = _hard_labels(probabilities, masks, classes)
    return (
        loss_sum,
        tf.reduce_sum(predicted * truth, axis=[0, 1, 2]),
        tf.reduce_sum(predicted, axis=[0, 1, 2]),
        tf.reduce_sum(truth, axis=[0, 1, 2]),
    )


def _hard_labels(probabilities, masks, classes: int):
    if classes == 1:
        return tf.cast(probabilities > 0.5, tf.float32), masks
    predicted = tf.one_hot(tf.argmax(probabilities, axis=-1), classes, dtype=tf.float32)
    return predicted[..., 1:], masks[..., 1:]


def segmentation_scores(total, examples):
    loss_sum, intersection, predicted, truth = total
    union = predicted + truth - intersection
    present = tf.cast(union > 0, tf.float32)
    n_present = tf.maximum(tf.reduce_sum(present), 1.0)
    iou = tf.reduce_sum(tf.math.divide_no_nan(intersection, union) * present) / n_present
    f1 = tf.reduce_sum(tf.math.divide_no_nan(2.0 * intersection, predicted + truth) * present) / n_present
    return {"loss": loss_sum / examples, "iou": iou, "f1": f1}
