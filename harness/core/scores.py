"""Scores from what each image contributed (loss, per-class pixel counts): numpy only, so that
the tables and statistics read from a run's files (`harness report`, `harness compare --pairs`)
need no TensorFlow. The counts come from `core.evaluation`."""

from __future__ import annotations

import numpy as np

from harness.config.metrics import per_class


def segmentation_scores(totals: dict, examples) -> dict:
    """Mean loss, IoU and F1 (dice) from summed counts. Works on any leading axes (one image, all
    of them, a batch of bootstrap resamples): counts are [..., C'] and `examples` broadcasts.
    Classes absent from both prediction and truth are left out of the mean; where no class is
    present at all (an empty image predicted empty), IoU and F1 are 1: nothing to get wrong."""
    intersection, predicted, truth = (np.asarray(totals[k], np.float64) for k in ("intersection", "predicted", "truth"))
    union = predicted + truth - intersection
    present = union > 0
    n_present = present.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(present, intersection / np.where(present, union, 1.0), 0.0).sum(-1) / np.maximum(n_present, 1)
        f1 = np.where(present, 2.0 * intersection / np.where(present, predicted + truth, 1.0), 0.0).sum(-1) / np.maximum(n_present, 1)
    iou, f1 = np.where(n_present > 0, iou, 1.0), np.where(n_present > 0, f1, 1.0)
    scores = {"loss": np.asarray(totals["loss"], np.float64) / examples, "iou": iou, "f1": f1}
    if "compare_loss" in totals:  # members on different losses: each also scored on the common one
        scores["compare_loss"] = np.asarray(totals["compare_loss"], np.float64) / examples
    if intersection.shape[-1] > 1:  # multi-class: each class's own IoU and F1 too
        with np.errstate(invalid="ignore", divide="ignore"):
            for c in range(intersection.shape[-1]):
                scores[per_class("iou", c + 1)] = np.where(present[..., c], intersection[..., c] / np.where(present[..., c], union[..., c], 1.0), np.nan)
                scores[per_class("f1", c + 1)] = np.where(present[..., c], 2 * intersection[..., c] / np.where(present[..., c], predicted[..., c] + truth[..., c], 1.0), np.nan)
    return scores


def mask_classes(mask: np.ndarray) -> np.ndarray:
    """A mask or a prediction as class ids per pixel: binary probability -> 0/1 at 0.5;
    multi-class one-hot or probabilities -> the likeliest class; a true pixel of no class
    (data.ignore_label: -1, or all zeros one-hot) -> NaN."""
    if mask.shape[-1] == 1:
        return np.where(mask[..., 0] < 0, np.nan, (mask[..., 0] > 0.5).astype(float))
    return np.where(mask.sum(axis=-1) == 0, np.nan, mask.argmax(axis=-1).astype(float))


def shows_foreground(mask: np.ndarray) -> bool:
    """Whether a true mask marks any pixel as a foreground class (class 0 is background)."""
    return bool(np.nan_to_num(mask_classes(mask)).any())
