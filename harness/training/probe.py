"""Probes run at the end of a run. Isolated cost of each model: ms per training step when it
runs alone. And the input pipeline's share of the fused step's time.

The fused step is one graph, so its time cannot be split between models. On one replica every
member has a switch in the step (`harness.core.step.switched`): the probe runs the run's own
compiled loop with one member switched on at a time, on a few batches held in memory, with no new
trace. Over several replicas it traces each member's own step alone. Either way every variable the
probe touched (weights, optimizer slots, flags, switches, the global step) is put back exactly as
it was: the trained models are left bit for bit unchanged.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time

from harness.core.backend import import_tf
from harness.core.step import member_fragment
from harness.data.pipeline import without_autotuning
from harness.members.base import preserved_state

tf = import_tf()


def probe_ms_per_step(members, strategy, images, masks, steps: int, seconds: float = math.inf) -> dict[str, float]:
    """Each member's own step traced alone and timed on one batch (several replicas, or a member
    the fused step no longer holds): the median of at most `steps` calls (`steps_within`)."""
    if steps <= 0:
        return {}
    batch = int(images.shape[0])
    results = {}
    for member in members:
        with preserved_state(member):
            results[member.name] = _time_member(member, strategy, images, masks, batch, steps, seconds)
    return results


def steps_within(seconds: float, settle_s: float, most: int) -> int:
    """How many steps a timed call takes: `most`, or fewer when the settling step shows that fewer
    fill `seconds` (a 1.6-s step is timed once, not five times: the noise of a per-step mean over
    seconds of work is already small, and every timed step is a step the user waits for). With
    no limit (`seconds` infinite, the probes' default) always `most`."""
    fill = seconds / max(settle_s, 1e-6)
    return most if fill >= most else max(1, math.ceil(fill))


def probe_switched_ms_per_step(train_loop, switches: dict, members, global_step, batches, steps: int, seconds: float = math.inf, rounds: int = 1) -> dict[str, float]:
    """Each member alone in the run's compiled loop (every other switch off): the median over
    `rounds` calls of at most `steps` steps (`steps_within(seconds, ...)`) on `batches` (an
    iterator over batches held in memory), after one untimed step with this member alone. Its ops
    ran at every step of the run, so one step settles the new combination of branches (the
    quickstart's probe took 54 s with three timed calls after a whole warm-up call; it is a
    per-step mean either way)."""
    if steps <= 0:
        return {}
    was_on = {name: bool(switch.numpy()) for name, switch in switches.items()}
    step_before = global_step.numpy()
    results = {}
    try:
        with contextlib.ExitStack() as stack:
            for member in members:
                stack.enter_context(preserved_state(member))
            for member in members:
                for name, switch in switches.items():
                    switch.assign(name == member.name)
                timed = steps_within(seconds, _timed_call(train_loop, batches, 1), steps)
                times = [_timed_call(train_loop, batches, timed) for _ in range(rounds)]
                results[member.name] = 1000.0 * statistics.median(times) / timed
    finally:
        for name, switch in switches.items():
            switch.assign(was_on[name])
        global_step.assign(step_before)
    return results


def _timed_call(call, *args) -> float:
    """Seconds of one compiled call (the fused loop, or a member's step alone), its outputs
    fetched to the host: the sync a run makes."""
    began = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), call(*args))
    return time.perf_counter() - began


def _time_member(member, strategy, images, masks, batch: int, steps: int, seconds: float) -> float:
    step = tf.constant(0, tf.int64)
    fragment = member_fragment(member, batch, jit_compile=False)  # compiled whole, below

    # Graph code as written, as the run's own step (step.py): autograph is on again only from the
    # member's methods (graph_method); converting harness's side here too once failed in a test
    # run with a TypeError from inside autograph's converted copy of it.
    @tf.autograph.experimental.do_not_convert
    def alone(images, masks):
        outputs = strategy.run(fragment, args=(images, masks, step))
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)

    one = tf.function(alone, jit_compile=bool(member.spec.jit_compile))

    with strategy.scope():
        _timed_call(one, images, masks)  # trace + warm-up, untimed
        times = [_timed_call(one, images, masks)]  # the first timed call decides how many there are
        times += [_timed_call(one, images, masks) for _ in range(steps_within(seconds, times[0], steps) - 1)]
    return 1000.0 * statistics.median(times)


def probe_input_wait_share(train_loop, placement, members, global_step, dataset, in_memory_dataset, steps: int, seconds: float = math.inf, rounds: int = 1) -> float | None:
    """The share of the fused step's time that goes to the input pipeline: the compiled loop is
    timed on the real pipeline and on a few of its batches held in memory (free input),
    alternating, at most `steps` steps a call (`steps_within(seconds, ...)`); share = 1 - t(in
    memory) / t(real), the median over rounds, floored at 0.

    Measured by difference because on a CPU the pipeline does not only make the step wait: its
    threads also take cores from the models. State (weights, optimizer slots, flags, the global
    step) is put back afterwards, so the run's results are unchanged.

    Both iterators run without tf.data's autotuning (`without_autotuning`): a parallel map then
    runs one call per core (16 calls of 0.1 s took 0.82 s on 2 cores with autotuning and without).
    With autotuning, dropping the real pipeline's iterator waited for its tuning thread (a native
    stack: `RootDataset::Iterator::~Iterator` joining `Model::OptimizeLoop`): 4.1 and 4.5 s timed,
    the probe 12.0-12.8 s in 8 runs on the quickstart's networks against 7.4-8.6 s where it did not
    wait (it depends on timing)."""
    if steps <= 0:
        return None
    real = placement.input_iterator(without_autotuning(dataset))
    in_memory = placement.input_iterator(in_memory_dataset)  # `held_in_memory(dataset, steps)`: none either
    step_before = global_step.numpy()
    with contextlib.ExitStack() as stack:
        for member in members:
            stack.enter_context(preserved_state(member))
        settle_s = _timed_call(train_loop, in_memory, 1)  # each iterator's first batch and threads: untimed
        _timed_call(train_loop, real, 1)
        timed, shares = steps_within(seconds, settle_s, steps), []
        for _ in range(rounds):
            real_s, memory_s = _timed_call(train_loop, real, timed), _timed_call(train_loop, in_memory, timed)
            shares.append(max(0.0, 1.0 - memory_s / real_s))
    global_step.assign(step_before)
    return round(statistics.median(shares), 4)


def held_in_memory(dataset, steps: int):
    """The first `steps` batches of `dataset`, read once now and held in memory as tensors,
    repeated: input that costs the step nothing, with the same structure and shapes as
    `dataset` (no new trace). Not `dataset.take(steps).cache()`: an iterator over that still
    holds the pipeline behind the cache.

    Without tf.data's autotuning: there is nothing to tune (no parallel map, no prefetch), and an
    autotuned iterator's destructor joins its tuning thread, which kept the probe waiting after
    its last timed call (7.4 s and 6.7 s measured on the quickstart's four networks, in the
    native stack `RootDataset::Iterator::~Iterator`; 0.00 s in three runs without it)."""
    batches = list(dataset.take(steps))
    stacked = tf.nest.map_structure(lambda *parts: tf.stack(parts), *batches)
    return without_autotuning(tf.data.Dataset.from_tensor_slices(stacked).repeat())
