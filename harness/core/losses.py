"""Segmentation losses, per example, so a step can divide by the GLOBAL batch under any strategy.

A loss is named in the config as a weighted sum of terms: `bce`, `dice`, `bce+dice`,
`bce + 0.5*dice`, `focal+dice`. The grammar is config/losses.py (no TensorFlow); building is here.
"""

from __future__ import annotations

from typing import Callable

from harness.config.losses import parse_loss
from harness.core.backend import import_tf

_EPS = 1e-7


def make_loss(text: str) -> Callable:
    """Return f(y_true, y_pred) -> per-example loss of shape [batch]."""
    tf = import_tf()
    functions = {"bce": _bce, "cce": _cce, "dice": _dice, "focal": _focal}
    terms = [(w, functions[name]) for w, name in parse_loss(text)]

    def loss(y_true, y_pred):
        y_true = tf.cast(y_true, tf.float32)
        y_pred = tf.cast(y_pred, tf.float32)
        total = None
        for weight, fn in terms:
            value = fn(tf, y_true, y_pred)
            value = value if weight == 1.0 else weight * value
            total = value if total is None else total + value
        return total

    return loss


def _bce(tf, y, p):
    p = tf.clip_by_value(p, _EPS, 1.0 - _EPS)
    per_pixel = -(y * tf.math.log(p) + (1.0 - y) * tf.math.log(1.0 - p))
    return tf.reduce_mean(per_pixel, axis=[1, 2, 3])


def _cce(tf, y, p):
    p = tf.clip_by_value(p, _EPS, 1.0)
    return tf.reduce_mean(-tf.reduce_sum(y * tf.math.log(p), axis=-1), axis=[1, 2])


def _dice(tf, y, p, smooth=1.0):
    intersection = tf.reduce_sum(y * p, axis=[1, 2, 3])
    total = tf.reduce_sum(y, axis=[1, 2, 3]) + tf.reduce_sum(p, axis=[1, 2, 3])
    return 1.0 - (2.0 * intersection + smooth) / (total + smooth)


def _focal(tf, y, p, gamma=2.0, alpha=0.25):
    p = tf.clip_by_value(p, _EPS, 1.0 - _EPS)
    positive = -alpha * tf.pow(1.0 - p, gamma) * y * tf.math.log(p)
    negative = -(1.0 - alpha) * tf.pow(p, gamma) * (1.0 - y) * tf.math.log(1.0 - p)
    return tf.reduce_mean(positive + negative, axis=[1, 2, 3])
