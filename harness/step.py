"""The fused step: what one step computes (members' fragments) and how it is compiled.

`make_train_loop` returns a `TrainLoop`: called with (iterator, k) it runs k steps, each taking
one batch from the shared iterator and running every member's fragment on it, in config order,
unrolled at trace time, and returns every step's metrics, stacked, in one host sync.

Two compiled forms, one per run: for `steps_per_call` > 1, ONE tf.function with a graph loop
whose count is a tensor (calls cut short at epoch ends or checkpoints reuse the same trace), the
metrics gathered on device in TensorArrays; for `steps_per_call` 1, one step with no graph loop
around it. A graph loop costs 0.5-2 ms per call (2-7% of a 30 ms step), which one step per call
cannot spread (README, Benchmarks); both forms run the same ops per step: identical results.
"""

from __future__ import annotations

from .backend import import_tf

tf = import_tf()


class TrainLoop:
    """Runs k training steps per call: `loop(iterator, k)` -> {member: {metric: tensor[k]}}."""

    def __init__(self, one_step, metric_names: dict, steps_per_call: int):
        self.single = steps_per_call == 1
        self._step_fn = tf.function(lambda iterator: _stacked(one_step(iterator)))
        self._loop_fn = tf.function(lambda iterator, num_steps: _loop(one_step, metric_names, iterator, num_steps))

    def __call__(self, iterator, k: int):
        if not self.single:
            return self._loop_fn(iterator, tf.constant(k, tf.int32))
        results = [self._step_fn(iterator) for _ in range(k)]  # k > 1 only from the end-of-run probe
        return results[0] if k == 1 else tf.nest.map_structure(lambda *ts: tf.concat(ts, axis=0), *results)

    def tracing_count(self) -> int:
        return self._step_fn.experimental_get_tracing_count() + self._loop_fn.experimental_get_tracing_count()


def make_train_loop(members, placement, global_step, global_batch: int, steps_per_call: int = 10) -> TrainLoop:
    strategy = placement.strategy
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
        if placement.distributed:
            per_replica = strategy.run(replica_step, args=(images, masks, step))
            outputs = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], per_replica)
        else:  # one replica: members are called directly, each on its pinned device
            outputs = replica_step(images, masks, step)
        global_step.assign_add(1)
        return outputs

    return TrainLoop(one_step, {m.name: m.metric_names for m in members}, steps_per_call)


def _loop(one_step, metric_names: dict, iterator, num_steps):
    arrays = {
        name: {metric: tf.TensorArray(tf.float32, size=num_steps) for metric in metrics}
        for name, metrics in metric_names.items()
    }
    for i in tf.range(num_steps):
        arrays = _write_all(arrays, one_step(iterator), i)
    return tf.nest.map_structure(lambda a: a.stack(), arrays)


def _stacked(outputs):
    """One step's metrics in the loop's layout: float32, a leading axis of length 1."""
    return tf.nest.map_structure(lambda t: tf.expand_dims(tf.cast(t, tf.float32), 0), outputs)


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
