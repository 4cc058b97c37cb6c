"""The fused step: what one step computes (members' fragments) and how it is compiled.

`make_train_loop` returns a `TrainLoop`: called with (iterator, k) it runs k steps, each taking
one element from the shared iterator (a tuple of batches, one per input stream: one per repeat)
and running every member's fragment on its stream's batch, in config order, unrolled at trace
time, and returns every step's metrics, stacked, in one host sync.

Two compiled forms, one per run: for `steps_per_call` > 1, ONE tf.function with a graph loop
whose count is a tensor (calls cut short at epoch ends or checkpoints reuse the same trace), the
metrics gathered on device in TensorArrays; for `steps_per_call` 1, one step with no graph loop
around it. A graph loop costs 0.5-2 ms per call (2-7% of a 30 ms step), which one step per call
cannot spread (README, Benchmarks); both forms run the same ops per step: identical results.
"""

from __future__ import annotations

from harness.core.backend import import_tf
from harness.core.member_step import LEARNING_RATE, run_member_step

tf = import_tf()


class TrainLoop:
    """Runs k training steps per call: `loop(iterator, k)` -> {member: {metric: tensor[k]}}."""

    def __init__(self, one_step, metric_names: dict, steps_per_call: int):
        self.single = steps_per_call == 1
        # Both traced without autograph (`make_train_loop`): the one-step form's first call on smoke
        # 4.78 s against 5.81 s with it (medians of 3 alternating runs).
        self._step_fn = tf.function(lambda iterator: _stacked(one_step(iterator)), autograph=False)
        self._loop_fn = tf.function(lambda iterator, num_steps: _loop(one_step, metric_names, iterator, num_steps), autograph=False)

    def __call__(self, iterator, k: int):
        if not self.single:
            return self._loop_fn(iterator, tf.constant(k, tf.int32))
        results = [self._step_fn(iterator) for _ in range(k)]  # k > 1 only from the end-of-run probe
        return results[0] if k == 1 else tf.nest.map_structure(lambda *ts: tf.concat(ts, axis=0), *results)

    def tracing_count(self) -> int:
        return self._step_fn.experimental_get_tracing_count() + self._loop_fn.experimental_get_tracing_count()


def make_train_loop(members, placement, global_step, global_batch: int, steps_per_call: int = 10, compare_loss: dict | None = None, switches: dict | None = None) -> TrainLoop:
    """`compare_loss`: member name -> per-example loss function, for the members also scored on
    the common loss (a `compare_loss` metric). `switches`: member name -> a boolean variable; a
    member whose switch is off runs none of its ops (see `switched`)."""
    strategy = placement.strategy
    compare_loss = compare_loss or {}
    names = {m.name: (*m.metric_names, LEARNING_RATE, *(("compare_loss",) if m.name in compare_loss else ())) for m in members}
    fragments = [member_fragment(m, global_batch, compare_loss=compare_loss.get(m.name)) for m in members]
    if switches:
        fragments = [switched(f, switches[m.name], names[m.name]) for m, f in zip(members, fragments)]

    def replica_step(streams, step):
        outputs = {m.name: fragment(*streams[m.stream], step) for m, fragment in zip(members, fragments)}
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            # Each replica's loss is already divided by the GLOBAL batch: their sum is the batch
            # mean. Summed here, in replica context, every replica holds the same result.
            outputs = context.all_reduce(tf.distribute.ReduceOp.SUM, outputs)
        return outputs

    def one_step(iterator):
        streams = next(iterator)
        step = global_step + 1
        if placement.distributed:
            per_replica = strategy.run(replica_step, args=(streams, step))
            outputs = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], per_replica)
        else:  # one replica: members are called directly, each on its pinned device
            outputs = replica_step(streams, step)
        global_step.assign_add(1)
        return outputs

    # harness's side of a step is graph code as written (its branches on tensors are explicit
    # tf.conds, its loop an explicit tf.while_loop): traced as is, not rewritten by autograph,
    # whose source transforms of about 50 of harness's functions took over a third of smoke's first
    # call. A user's kind and a model's `call` still get autograph (`graph_method`).
    return TrainLoop(tf.autograph.experimental.do_not_convert(one_step), names, steps_per_call)


def make_switches(members, strategy) -> dict:
    """A switch per member for `switched`: a boolean variable, on, made in `strategy`'s scope."""
    with strategy.scope():
        return {m.name: tf.Variable(True, trainable=False, name=f"switch_{i}") for i, m in enumerate(members)}


def switched(fragment, switch, metric_names):
    """A fragment behind an on/off switch read at every step: on, the member's step exactly as
    without it (the same ops, in a branch of its own); off, none of its ops run and its metrics are
    NaN (the run drops those rows). A member leaves the step by its switch, without a new trace.
    Single-replica placements only: a switch around a cross-replica sum would be a sync point
    inside control flow."""

    def run(images, masks, step):
        def on():
            return {k: tf.cast(v, tf.float32) for k, v in fragment(images, masks, step).items()}

        def off():
            return {k: tf.constant(float("nan"), tf.float32) for k in metric_names}

        return tf.cond(switch, on, off)

    return run


def _loop(one_step, metric_names: dict, iterator, num_steps):
    arrays = {
        name: {metric: tf.TensorArray(tf.float32, size=num_steps) for metric in metrics}
        for name, metrics in metric_names.items()
    }

    # tf.while_loop as autograph would make it of `for i in tf.range(num_steps)`, written out: the
    # loop traced without autograph took 0.3 s less of smoke's first call (3.85 s against 4.16 s,
    # medians of 4 alternating runs), the same ops in the same order.
    def body(i, arrays):
        return i + 1, _write_all(arrays, one_step(iterator), i)

    _, arrays = tf.while_loop(lambda i, _: i < num_steps, body, (tf.constant(0, tf.int32), arrays))
    return tf.nest.map_structure(lambda a: a.stack(), arrays)


def _stacked(outputs):
    """One step's metrics in the loop's layout: float32, a leading axis of length 1."""
    return tf.nest.map_structure(lambda t: tf.expand_dims(tf.cast(t, tf.float32), 0), outputs)


def _write_all(arrays, outputs, i):
    return {
        name: {metric: array.write(i, tf.cast(outputs[name][metric], tf.float32)) for metric, array in metrics.items()}
        for name, metrics in arrays.items()
    }


def member_fragment(member, global_batch: int, jit_compile: bool | None = None, compare_loss=None):
    """f(images, masks, step) -> the member's metrics: its step with the mechanics around it,
    XLA-compiled on its own when asked (the loop around it holds the input iterator, which XLA
    cannot compile, so jit applies per member, as Keras does per step)."""

    def fragment(images, masks, step):
        return run_member_step(member, images, masks, global_batch, step, compare_loss)

    jit = member.spec.jit_compile if jit_compile is None else jit_compile
    return tf.function(fragment, jit_compile=True) if jit else fragment
