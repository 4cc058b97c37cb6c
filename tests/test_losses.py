"""The loss terms' formulas, on hand-made targets and predictions."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.data_spec import IGNORED_LABEL
from harness.core.backend import import_tf
from harness.core.losses import make_loss

tf = import_tf()


def soft_dice(y, p, smooth=1.0):
    """Per image and class: (2 |y p| + 1) / (|y| + |p| + 1)."""
    return (2.0 * (y * p).sum(axis=(1, 2)) + smooth) / (y.sum(axis=(1, 2)) + p.sum(axis=(1, 2)) + smooth)


def three_classes():
    """An 8x8 image of background with a 2x2 square of class 1 and one of class 2."""
    labels = np.zeros((1, 8, 8), int)
    labels[0, 1:3, 1:3], labels[0, 5:7, 5:7] = 1, 2
    return labels, np.eye(3, dtype=np.float32)[labels]


def test_dice_with_several_classes_is_the_mean_of_each_class_own():
    """Each class counts the same: a model that marks every pixel background misses two of three
    classes."""
    labels, y = three_classes()
    all_background = np.eye(3, dtype=np.float32)[np.zeros_like(labels)]
    loss = make_loss("dice")(tf.constant(y), tf.constant(all_background)).numpy()
    np.testing.assert_allclose(loss, 1.0 - soft_dice(y, all_background).mean(axis=-1), rtol=1e-6)
    assert loss[0] > 0.5  # 0.56; pooled over the channels 0.12
    right = make_loss("dice")(tf.constant(y), tf.constant(y)).numpy()
    np.testing.assert_allclose(right, 0.0, atol=1e-6)


def test_dice_of_one_channel_is_over_the_image_pixels():
    rng = np.random.default_rng(0)
    y = (rng.uniform(size=(3, 6, 6, 1)) > 0.5).astype(np.float32)
    p = rng.uniform(0.05, 0.95, size=(3, 6, 6, 1)).astype(np.float32)
    np.testing.assert_allclose(make_loss("dice")(tf.constant(y), tf.constant(p)).numpy(), 1.0 - soft_dice(y, p)[:, 0], rtol=1e-6)


@pytest.mark.parametrize("loss", ["dice", "cce+dice"])
def test_multi_class_dice_leaves_out_a_pixel_of_no_class(loss):
    labels, _ = three_classes()
    p = tf.nn.softmax(np.random.default_rng(1).normal(size=(1, 8, 8, 3)).astype(np.float32)).numpy()
    labels[:, 0, :] = IGNORED_LABEL
    y = tf.one_hot(labels, 3).numpy()  # an id past the depth: all zeros
    with_ignore = make_loss(loss, ignore=True)(tf.constant(y), tf.constant(p)).numpy()
    np.testing.assert_allclose(with_ignore, make_loss(loss)(tf.constant(y[:, 1:]), tf.constant(p[:, 1:])).numpy(), rtol=1e-5)


@pytest.mark.parametrize(("written", "said"), [
    ("binary_crossentropy", "(did you mean 'bce'? binary_crossentropy is another library's name for it)"),
    ("bce+categorical_crossentropy", "(did you mean 'cce'? categorical_crossentropy is another library's name for it)"),
    ("jaccard", "(no Jaccard/IoU loss here: 'dice' is its close relative"),
    ("dcie", "(did you mean 'dice'?)"),
])
def test_a_loss_named_as_keras_or_segmentation_models_name_it_says_harnesss_term(written, said):
    from harness.config.losses import parse_loss

    with pytest.raises(ValueError) as info:
        parse_loss(written)
    assert said in str(info.value) and "terms are bce, cce, dice, focal" in str(info.value)
