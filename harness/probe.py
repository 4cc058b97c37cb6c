"""Isolated cost of each model: ms per training step when it runs alone.

The fused step is one graph, so its time cannot be split between models. The probe runs each
member's own step for a few iterations on one batch, then puts every variable it touched (weights,
optimizer slots, flags) back exactly as it was: the trained models are left bit for bit unchanged.
"""

from __future__ import annotations

import statistics
import time

from .backend import import_tf
from .members import preserved_state

tf = import_tf()


def probe_ms_per_step(members, strategy, images, masks, steps: int) -> dict[str, float]:
    if steps <= 0:
        return {}
    batch = int(images.shape[0])
    results = {}
    for member in members:
        with preserved_state(member):
            results[member.name] = _time_member(member, strategy, images, masks, batch, steps)
    return results


def _time_member(member, strategy, images, masks, batch: int, steps: int) -> float:
    step = tf.constant(0, tf.int64)

    @tf.function(jit_compile=bool(member.spec.jit_compile))
    def one(images, masks):
        outputs = strategy.run(member.train_step, args=(images, masks, batch, step))
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)

    with strategy.scope():
        tf.nest.map_structure(lambda t: t.numpy(), one(images, masks))  # trace + warm-up, untimed
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), one(images, masks))
            times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)
