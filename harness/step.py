"""The fused step: what one step computes (members' fragments) and how it is compiled (one loop).

`make_train_loop` returns ONE tf.function that runs `num_steps` steps per call (a tensor, so any
count reuses the same trace). Each step takes one batch from the shared iterator and runs every
member's fragment on it, in config order, unrolled at trace time. Per-step metrics are gathered
on device in TensorArrays and reach the host once per call.
"""

from __future__ import annotations

from .backend import import_tf

tf = import_tf()


def make_train_loop(members, strategy, global_step, global_batch: int):
    fragments = [_compile_fragment(m) for m in members]

    def replica_step(images, masks, step):
        outputs = {m.name: fragment(images, masks, global_batch, step) for m, fragment in zip(members, fragments)}
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            # Each replica's loss is already divided by the GLOBAL batch: their sum is the batch
            # mean. Summed here, in replica context, every replica holds the same result.
            outputs = context.all_reduce(tf.distribute.ReduceOp.SUM, outputs)
        return outputs

    def one_step(iterator):
        images, masks = next(iterator)
        step = global_step + 1
        per_replica = strategy.run(replica_step, args=(images, masks, step))
        outputs = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], per_replica)
        global_step.assign_add(1)
        return outputs

    metric_names = {m.name: m.metric_names for m in members}

    @tf.function
    def train_loop(iterator, num_steps):
        arrays = {
            name: {metric: tf.TensorArray(tf.float32, size=num_steps) for metric in metrics}
            for name, metrics in metric_names.items()
        }
        for i in tf.range(num_steps):
            outputs = one_step(iterator)
            arrays = _write_all(arrays, outputs, i)
        return tf.nest.map_structure(lambda a: a.stack(), arrays)

    return train_loop


def _write_all(arrays, outputs, i):
    return {
        name: {metric: array.write(i, tf.cast(outputs[name][metric], tf.float32)) for metric, array in metrics.items()}
        for name, metrics in arrays.items()
    }


def _compile_fragment(member):
    """A member's fragment, XLA-compiled on its own when asked: the loop around it holds the input
    iterator, which XLA cannot compile, so jit applies per member, as Keras does per step."""
    if member.spec.jit_compile:
        return tf.function(member.train_step, jit_compile=True)
    return member.train_step


# ---------------------------------------------------------------------------------------------
# Validation


def make_eval_fn(members, classes: int):
    """One tf.function that runs every member over the whole validation set.

    Each member says what it sums per batch (`eval_batch`, from `eval_zeros`) and how the sums
    become scores (`eval_scores`); for segmentation: mean loss, IoU and F1 (dice) of the
    thresholded (binary) or argmax (multi-class) prediction, from intersection and union counts
    summed over the whole set, background excluded for multi-class tasks.
    """

    def batch_counts(images, masks):
        counts = {m.name: m.eval_batch(images, masks, classes) for m in members}
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
