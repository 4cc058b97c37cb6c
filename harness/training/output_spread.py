"""Does each network's output depend on its input? A network stuck on a plateau, with dead units,
or collapsed (a deep autoencoder that learned the mean image, a GAN's generator that gives one
mask) gives nearly the same output for every image. Ranked beside networks that learned, its place
says how far it is from learning, not what its architecture can do, and a difference "supported"
against it is a difference against a constant.

The measure, `output_spread`: over the first SPREAD_IMAGES validation images, each output
element's standard deviation across the images, averaged over the elements, as a share of the same
for the targets (the masks; the images, for an autoencoder). It asks nothing of the scores, so it
tells a stuck network from a weak one. One forward pass of those images per member, eagerly, at
the end of the run, with the weights the ranking scores (with a test split, those it scored:
held_out.py); what counts as stuck, and the words for it: outputs/stuck.py.
"""

from __future__ import annotations

import numpy as np

from harness.core.member_step import on_device

SPREAD_IMAGES = 8  # a collapse shows on two; eight steady a working network's figure (on 4 the quickstart's moved up to 30%)


def spread_across_images(values) -> float:
    """Each element's standard deviation across the images (axis 0), averaged over the elements."""
    return float(np.asarray(values, np.float64).std(axis=0).mean())


def output_spread(predictions, targets) -> float | None:
    """The predictions' spread across images as a share of the targets', to 3 significant digits;
    None where it says nothing: fewer than two images, targets all alike, or predictions not finite
    (a diverged network)."""
    if len(targets) < 2 or (reference := spread_across_images(targets)) <= 0:
        return None
    value = spread_across_images(predictions) / reference
    return float(f"{value:.3g}") if np.isfinite(value) else None


def first_images(dataset, count: int = SPREAD_IMAGES) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` images and masks of a dataset of (images, masks) batches (all it has, if
    fewer)."""
    images, masks, held = [], [], 0
    for batch_images, batch_masks in dataset:
        images.append(batch_images.numpy())
        masks.append(batch_masks.numpy())
        held += len(images[-1])
        if held >= count:
            break
    if not images:
        return np.zeros((0,)), np.zeros((0,))
    return np.concatenate(images)[:count], np.concatenate(masks)[:count]


def member_output_spread(member, images: np.ndarray, masks: np.ndarray) -> float | None:
    """`output_spread` of a member's predictions (what its validation scores, `Member.predict`)
    against its targets, computed on its own device."""
    if len(images) < 2:
        return None
    try:
        with on_device(member.device):
            predictions = np.asarray(member.predict(images), np.float32)
    except Exception:  # noqa: BLE001 (a kind of a user's whose predict gives no array, or runs only in graph code: not measured; a diagnostic never costs the run)
        return None
    if predictions.shape[:1] != images.shape[:1]:
        return None
    # Pixels that `data.ignore_label` leaves without a class are negative in the masks: no target.
    targets = images if member.task == "reconstruction" else np.maximum(masks, 0)
    return output_spread(predictions, targets)
