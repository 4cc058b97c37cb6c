"""Training-time augmentation with native TensorFlow ops and stateless randomness.

Every random draw is a function of a key (seed, step, position in the batch), never of hidden
state: the batch for a step is the same in every run, every model sees the same augmented batch
(it is made once), and a resumed run sees what it would have seen. Geometric changes apply to the
image and its mask alike (the mask resampled nearest-neighbour, so labels stay labels);
brightness and contrast apply to the image only.
"""

from __future__ import annotations

from harness.core.backend import import_tf
from harness.config.schema import AugmentSpec

tf = import_tf()


def make_augment_fn(spec: AugmentSpec, image_size: tuple[int, int]):
    """f(image, mask, key[int64 x2]) -> (image, mask), or None when nothing is switched on."""
    if not spec.active:
        return None
    height, width = image_size

    def draw(key, salt, shape=(), low=0.0, high=1.0):
        return tf.random.stateless_uniform(shape, seed=key + tf.constant([0, 7919], tf.int64) * salt, minval=low, maxval=high)

    def augment(image, mask, key):
        if spec.flip_left_right:
            flip = draw(key, 1) < 0.5
            image, mask = (tf.cond(flip, lambda t=t: tf.reverse(t, [1]), lambda t=t: t) for t in (image, mask))
        if spec.flip_up_down:
            flip = draw(key, 2) < 0.5
            image, mask = (tf.cond(flip, lambda t=t: tf.reverse(t, [0]), lambda t=t: t) for t in (image, mask))
        if spec.rotate90:
            turns = tf.cast(tf.floor(draw(key, 3, low=0.0, high=4.0)), tf.int32)
            image, mask = tf.image.rot90(image, turns), tf.image.rot90(mask, turns)
        if spec.crop_scale is not None:
            image, mask = _random_crop(image, mask, draw(key, 4, low=spec.crop_scale[0], high=spec.crop_scale[1]), draw(key, 5, (2,)), height, width)
        if spec.brightness:
            image = image + draw(key, 6, low=-spec.brightness, high=spec.brightness)
        if spec.contrast:
            mean = tf.reduce_mean(image, axis=[0, 1], keepdims=True)
            image = (image - mean) * draw(key, 7, low=1.0 - spec.contrast, high=1.0 + spec.contrast) + mean
        return tf.clip_by_value(image, 0.0, 1.0), mask

    return augment


def _random_crop(image, mask, scale, where, height: int, width: int):
    """A crop of `scale` of each side at a random place, resized back to height x width."""
    crop_h = tf.maximum(1, tf.cast(tf.round(scale * height), tf.int32))
    crop_w = tf.maximum(1, tf.cast(tf.round(scale * width), tf.int32))
    top = tf.cast(tf.floor(where[0] * tf.cast(height - crop_h + 1, tf.float32)), tf.int32)
    left = tf.cast(tf.floor(where[1] * tf.cast(width - crop_w + 1, tf.float32)), tf.int32)
    image = tf.image.resize(image[top : top + crop_h, left : left + crop_w], [height, width], method="bilinear")
    mask = tf.image.resize(mask[top : top + crop_h, left : left + crop_w], [height, width], method="nearest")
    return image, mask
