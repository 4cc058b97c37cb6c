"""Learning-rate schedules: a function of the optimizer's update count, nothing else, so a resumed
run continues the very same curve (the count is in every checkpoint).

    lr(t) = base * (t + 1) / warmup                        for t < warmup (linear warmup)
    lr(t) = base * shape(t - warmup)                       after it

with shape: constant 1; cosine floor + (1 - floor) * (1 + cos(pi * u)) / 2; polynomial
floor + (1 - floor) * (1 - u) ** power (power 0.9, as segmentation papers use); with
u = min(t', decay) / decay; piecewise: the product of the factors of every boundary passed.
"""

from __future__ import annotations

import math

from harness.core.backend import import_keras, import_tf

tf = import_tf()
keras = import_keras()


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, base: float, name: str = "constant", warmup_steps: int = 0, decay_steps: int = 1,
                 floor: float = 0.0, power: float = 0.9, boundaries: tuple[int, ...] = (), factors: tuple[float, ...] = ()):
        super().__init__()
        self.base, self.kind, self.warmup_steps, self.decay_steps = float(base), name, int(warmup_steps), max(1, int(decay_steps))
        self.floor, self.power, self.boundaries, self.factors = float(floor), float(power), tuple(boundaries), tuple(factors)

    def __call__(self, step):
        t = tf.cast(step, tf.float32)
        warm = float(max(1, self.warmup_steps))
        after = tf.maximum(t - float(self.warmup_steps), 0.0)
        value = self.base * self._shape(after)
        if self.warmup_steps:
            value = tf.where(t < float(self.warmup_steps), self.base * (t + 1.0) / warm, value)
        return value

    def _shape(self, t):
        u = tf.minimum(t, float(self.decay_steps)) / float(self.decay_steps)
        if self.kind == "cosine":
            return self.floor + (1.0 - self.floor) * 0.5 * (1.0 + tf.cos(math.pi * u))
        if self.kind == "polynomial":
            return self.floor + (1.0 - self.floor) * tf.pow(1.0 - u, self.power)
        if self.kind == "piecewise":
            factor = tf.constant(1.0)
            for boundary, f in zip(self.boundaries, self.factors):
                factor = tf.where(t >= float(boundary), factor * f, factor)
            return factor
        return tf.ones_like(t)

    def get_config(self) -> dict:
        return {"base": self.base, "name": self.kind, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps,
                "floor": self.floor, "power": self.power, "boundaries": list(self.boundaries), "factors": list(self.factors)}


def current_learning_rate(optimizer):
    """The learning rate the optimizer's next update uses (graph code)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's own
    schedule = getattr(inner, "_learning_rate", None)  # `learning_rate` is the value of the last update
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return tf.cast(schedule(inner.iterations), tf.float32)
    return tf.cast(inner.learning_rate, tf.float32)
