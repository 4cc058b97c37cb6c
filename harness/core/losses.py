"""Segmentation losses, per example, so a step can divide by the GLOBAL batch under any strategy.

A loss is named in the config as a weighted sum of terms: `bce`, `dice`, `bce+dice`,
`bce + 0.5*dice`, `focal+dice`. The grammar is config/losses.py (no TensorFlow); building is here.
"""

from __future__ import annotations

from typing import Callable

from harness.config.losses import parse_loss
from harness.core.backend import import_tf

_EPS = 1e-7


def make_loss(text: str, ignore: bool = False) -> Callable:
    """Return f(y_true, y_pred) -> per-example loss of shape [batch]. With `ignore`
    (`data.ignore_label`), pixels whose target is no class (-1 in one channel, all zeros one-hot:
    data/pipeline.py) are left out: each term is taken over an image's other pixels. Without it the
    terms are computed as they always were (a mean over every pixel), to the bit."""
    tf = import_tf()
    functions = {"bce": _bce, "cce": _cce, "dice": _dice, "focal": _focal}
    terms = [(w, functions[name]) for w, name in parse_loss(text)]

    def loss(y_true, y_pred):
        y_true = tf.cast(y_true, tf.float32)
        y_pred = tf.cast(y_pred, tf.float32)
        valid = None
        if ignore:
            valid = labelled_pixels(tf, y_true)
            y_true = tf.nn.relu(y_true)  # an ignored pixel's -1 (one channel) as 0; weighed out by `valid`
        total = None
        for weight, fn in terms:
            value = fn(tf, y_true, y_pred, valid)
            value = value if weight == 1.0 else weight * value
            total = value if total is None else total + value
        return total

    return loss


def labelled_pixels(tf, y_true):
    """[B, H, W, 1]: 1 where a pixel's target is a class, 0 where it is ignored (-1 in one channel;
    no class one-hot). Data without ignored pixels gives ones."""
    if y_true.shape[-1] == 1:
        return tf.cast(y_true >= 0.0, tf.float32)
    return tf.reduce_sum(y_true, axis=-1, keepdims=True)


def _pixel_mean(tf, per_pixel, valid, axes):
    """The mean of `per_pixel` over an image's pixels, or with `valid` over its labelled ones (an
    image with none gives 0)."""
    if valid is None:
        return tf.reduce_mean(per_pixel, axis=axes)
    if len(per_pixel.shape) == 3:  # [B, H, W]: summed over classes already
        valid = valid[..., 0]
    weights = valid * tf.ones_like(per_pixel)
    return tf.reduce_sum(per_pixel * weights, axis=axes) / tf.maximum(tf.reduce_sum(weights, axis=axes), 1.0)


def _bce(tf, y, p, valid=None):
    p = tf.clip_by_value(p, _EPS, 1.0 - _EPS)
    per_pixel = -(y * tf.math.log(p) + (1.0 - y) * tf.math.log(1.0 - p))
    return _pixel_mean(tf, per_pixel, valid, [1, 2, 3])


def _cce(tf, y, p, valid=None):
    p = tf.clip_by_value(p, _EPS, 1.0)
    return _pixel_mean(tf, -tf.reduce_sum(y * tf.math.log(p), axis=-1), valid, [1, 2])


def _dice(tf, y, p, valid=None, smooth=1.0):
    """One minus the soft Dice of an image; with several classes, the mean over the classes of each
    class's own (as segmentation_models' DiceLoss(per_image=True)), so every class counts the
    same. Pooled over the channels of a softmax instead, the denominator is always twice the pixel
    count and the term is one minus the mean probability of the true class: the background's pixels
    outweigh the rest and a model marking everything background scores well."""
    if valid is not None:
        y, p = y * valid, p * valid
    if y.shape[-1] == 1:  # binary: the one channel over the image's pixels
        intersection = tf.reduce_sum(y * p, axis=[1, 2, 3])
        total = tf.reduce_sum(y, axis=[1, 2, 3]) + tf.reduce_sum(p, axis=[1, 2, 3])
        return 1.0 - (2.0 * intersection + smooth) / (total + smooth)
    intersection = tf.reduce_sum(y * p, axis=[1, 2])
    total = tf.reduce_sum(y, axis=[1, 2]) + tf.reduce_sum(p, axis=[1, 2])
    return 1.0 - tf.reduce_mean((2.0 * intersection + smooth) / (total + smooth), axis=-1)


def _focal(tf, y, p, valid=None, gamma=2.0, alpha=0.25):
    p = tf.clip_by_value(p, _EPS, 1.0 - _EPS)
    positive = -alpha * tf.pow(1.0 - p, gamma) * y * tf.math.log(p)
    negative = -(1.0 - alpha) * tf.pow(p, gamma) * (1.0 - y) * tf.math.log(1.0 - p)
    return _pixel_mean(tf, positive + negative, valid, [1, 2, 3])
