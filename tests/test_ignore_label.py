"""`data.ignore_label`: pixels that are no class (VOC's void border) left out of the losses and of
the scores, end to end: the scan stores them, the pipeline encodes them as no class, the losses and
the counts leave them out; and the same formulas as ever without it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_config
from PIL import Image
from pictures import data_config, scan

from harness.config.data_spec import IGNORED_LABEL
from harness.config.loading import validate_config
from harness.core.backend import import_tf
from harness.core.evaluation import segmentation_counts
from harness.core.losses import make_loss
from harness.errors import ConfigError
from harness.rundir import read_csv

tf = import_tf()
rng = np.random.default_rng(0)


def binary_case():
    """Targets with a column ignored (-1), and predictions."""
    y = (rng.uniform(size=(2, 6, 6, 1)) > 0.5).astype(np.float32)
    p = rng.uniform(0.05, 0.95, size=(2, 6, 6, 1)).astype(np.float32)
    ignored = np.zeros_like(y, bool)
    ignored[:, :, 0] = True
    return np.where(ignored, -1.0, y).astype(np.float32), p, ignored


@pytest.mark.parametrize("loss", ["bce", "focal", "bce+dice"])
def test_a_loss_with_ignored_pixels_is_the_loss_of_the_other_pixels(loss):
    y, p, ignored = binary_case()
    kept_y, kept_p = y[:, :, 1:], p[:, :, 1:]  # the ignored column cut away
    with_ignore = make_loss(loss, ignore=True)(tf.constant(y), tf.constant(p)).numpy()
    on_the_rest = make_loss(loss)(tf.constant(kept_y), tf.constant(kept_p)).numpy()
    np.testing.assert_allclose(with_ignore, on_the_rest, rtol=1e-5)
    whole = np.where(ignored, 1.0, y)  # no pixel ignored: the same as the loss without the setting
    np.testing.assert_allclose(make_loss(loss, ignore=True)(tf.constant(whole), tf.constant(p)).numpy(),
                               make_loss(loss)(tf.constant(whole), tf.constant(p)).numpy(), rtol=1e-6)


def test_a_multi_class_loss_and_counts_leave_out_a_pixel_of_no_class():
    labels = rng.integers(0, 3, size=(2, 6, 6))
    labels[:, 0, :] = IGNORED_LABEL
    y = tf.one_hot(labels, 3).numpy()  # an id past the depth: all zeros
    p = tf.nn.softmax(rng.normal(size=(2, 6, 6, 3)).astype(np.float32)).numpy()
    with_ignore = make_loss("cce", ignore=True)(tf.constant(y), tf.constant(p)).numpy()
    np.testing.assert_allclose(with_ignore, make_loss("cce")(tf.constant(y[:, 1:]), tf.constant(p[:, 1:])).numpy(), rtol=1e-5)
    counts = segmentation_counts(tf.zeros([2]), tf.constant(p), tf.constant(y), 3)
    rest = segmentation_counts(tf.zeros([2]), tf.constant(p[:, 1:]), tf.constant(y[:, 1:]), 3)
    for key in ("intersection", "predicted", "truth"):
        np.testing.assert_array_equal(counts[key].numpy(), rest[key].numpy())


def test_binary_counts_leave_out_ignored_pixels_and_are_unchanged_without_them():
    y, p, ignored = binary_case()
    counts = segmentation_counts(tf.zeros([2]), tf.constant(p), tf.constant(y), 1)
    rest = segmentation_counts(tf.zeros([2]), tf.constant(p[:, :, 1:]), tf.constant(y[:, :, 1:]), 1)
    for key in ("intersection", "predicted", "truth"):
        np.testing.assert_array_equal(counts[key].numpy(), rest[key].numpy())
    whole = np.where(ignored, 0.0, y)
    plain = segmentation_counts(tf.zeros([2]), tf.constant(p), tf.constant(whole), 1)
    predicted = (p > 0.5).astype(np.float32)
    np.testing.assert_array_equal(plain["predicted"].numpy(), predicted.sum(axis=(1, 2)))
    np.testing.assert_array_equal(plain["intersection"].numpy(), (predicted * whole).sum(axis=(1, 2)))


def test_the_setting_is_checked_against_the_classes_the_source_and_the_kinds():
    with pytest.raises(ConfigError, match="ignore_label: 1 is a class id"):
        data_config({"source": "folder", "images": ".", "masks": ".", "ignore_label": 1})
    with pytest.raises(ConfigError, match="ignore_label: source synthetic does not read it"):
        data_config({"source": "synthetic", "ignore_label": 255})
    raw = tiny_config(data={"source": "folder", "images": ".", "masks": ".", "ignore_label": 255, "train_size": None, "val_size": None})
    raw["models"].append({"name": "g", "arch": "tiny_unet", "kind": "gan"})
    with pytest.raises(ConfigError, match="data.ignore_label with g: a GAN and a kind of your own train on the masks"):
        validate_config(raw)


def voided_folder(root, count=24, size=16):
    """Bright squares on dark noise, each ringed by bright pixels marked 255 (no class): folded into
    the background they are what a model cannot get right; ignored, nothing is left to get wrong."""
    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for i in range(count):
        r = np.random.default_rng(i)
        top, left = r.integers(2, size - 8, size=2)
        label = np.zeros((size, size), np.uint8)
        label[top - 2 : top + 6, left - 2 : left + 6] = 255
        label[top : top + 4, left : left + 4] = 1
        image = (r.uniform(0, 40, (size, size, 3)) + 200 * (label > 0)[..., None]).astype(np.uint8)
        Image.fromarray(image).save(images / f"ex{i:02d}.png")
        Image.fromarray(label).save(masks / f"ex{i:02d}.png")
    return images, masks


def test_the_scan_stores_ignored_pixels_and_a_run_scores_without_them(tmp_path):
    from harness.api import run

    images, masks = voided_folder(tmp_path / "d")
    data = {"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 4, "val_fraction": 0.3}
    scanned = scan(data_config({**data, "ignore_label": 255}))
    assert set(np.unique(scanned.labels).tolist()) == {0, 1, IGNORED_LABEL}
    with pytest.raises(Exception, match="255"):  # without the setting the value is a stray label
        scan(data_config(data))
    config = tiny_config(data={**data, "ignore_label": 255, "train_size": None, "val_size": None}, train={"epochs": 2})
    config["models"] = [{"name": "fcn", "arch": "tiny_fcn"}]
    config["output"]["progress"] = "none"
    result = run(validate_config(config), results_dir=tmp_path / "results")
    scores = read_csv(result.run_dir / "val_scores.csv")
    last = scores[scores.step == scores.step.max()].sort_values("image")
    # Recounted from the trained model on the validation images: a pixel of the ring is neither
    # predicted nor true, however the model marks it.
    first, n = scanned.train_size, scanned.val_size
    images, labels = scanned.images[first : first + n].astype(np.float32) / 255.0, scanned.labels[first : first + n]
    marked = result.models["fcn"](images, training=False).numpy()[..., 0] > 0.5
    labelled = labels != IGNORED_LABEL
    np.testing.assert_array_equal(last.truth.to_numpy(), (labels == 1).sum(axis=(1, 2)))
    np.testing.assert_array_equal(last.predicted.to_numpy(), (marked & labelled).sum(axis=(1, 2)))
    np.testing.assert_array_equal(last.intersection.to_numpy(), (marked & (labels == 1)).sum(axis=(1, 2)))
    assert (marked & ~labelled).any(), "the model marks some ring pixels: the test would not see them counted"
