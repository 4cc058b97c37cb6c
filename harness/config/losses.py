"""The loss grammar: a loss is named in the config as a weighted sum of terms (`bce`, `dice`,
`bce+dice`, `bce + 0.5*dice`, `focal+dice`). Parsing it needs no TensorFlow, so a typo is refused
when the config is read; core/losses.py builds the terms."""

from __future__ import annotations

import re

from harness.errors import closest

TERMS = ("bce", "cce", "dice", "focal")
# What an autoencoder trains on and is scored by: its reconstruction's mean squared error. Not a
# term of the grammar (a mask loss): the only loss an autoencoder takes, and one no other kind takes.
RECONSTRUCTION_LOSS = "mse"
# Keras's and segmentation-models' names, said as the term they are (or as the nearest there is).
_NAMED_ELSEWHERE = {
    "binary_crossentropy": "bce", "binarycrossentropy": "bce", "categorical_crossentropy": "cce",
    "categoricalcrossentropy": "cce", "sparse_categorical_crossentropy": "cce", "binary_focal": "focal",
    "binary_focal_loss": "focal", "categorical_focal_loss": "focal", "dice_loss": "dice", "f1": "dice",
    "jaccard": "dice", "jaccard_loss": "dice", "iou": "dice",
}
_TERM = re.compile(r"^\s*(?:(?P<weight>\d+(?:\.\d*)?(?:e-?\d+)?)\s*\*\s*)?(?P<name>[a-z]+)\s*$")


def parse_loss(text: str) -> list[tuple[float, str]]:
    """`"bce + 0.5*dice"` -> [(1.0, "bce"), (0.5, "dice")]; ValueError naming the bad term."""
    terms = []
    for part in text.split("+"):
        match = _TERM.match(part)
        if not match or match["name"] not in TERMS:
            raise ValueError(f"bad loss term {part.strip()!r} in {text!r}{_meant(part.split('*')[-1].strip())}; terms are "
                             f"{', '.join(TERMS)}, combined like 'bce+dice' or 'bce + 0.5*dice'")
        terms.append((float(match["weight"] or 1.0), match["name"]))
    return terms


def kind_loss_problems(predicts_masks: bool, loss: str | None, accepted: bool) -> list[str]:
    """An autoencoder trains on its reconstruction's MSE whatever `loss` says, so a mask loss given
    to it would be ignored without a word (a run's older config.yaml, `accepted`, filled train.loss
    in there too: read as it was); and MSE is no mask loss."""
    if loss is None:
        return []
    if predicts_masks and loss == RECONSTRUCTION_LOSS:
        return [f"loss {loss!r} is an autoencoder's reconstruction loss; a model that predicts masks trains on "
                "bce, cce, dice or focal, or a sum like 'bce+dice'"]
    if not predicts_masks and loss != RECONSTRUCTION_LOSS and not accepted:
        return [f"loss {loss!r}: an autoencoder trains on and is scored by its reconstruction's mean squared error "
                f"({RECONSTRUCTION_LOSS!r}), whatever loss says; remove loss from it"]
    return []


def _meant(name: str) -> str:
    """What a bad term most likely meant: another library's name for a term, or a typo of one."""
    if name.lower() in (RECONSTRUCTION_LOSS, "mean_squared_error", "l2"):
        return " (an autoencoder trains on mse by itself, with no loss given; a loss here is for models that predict masks)"
    elsewhere = _NAMED_ELSEWHERE.get(name.lower().replace(" ", "_"))
    if elsewhere and name.lower().startswith(("jaccard", "iou")):
        return f" (no Jaccard/IoU loss here: {elsewhere!r} is its close relative, and IoU is scored on validation anyway)"
    if elsewhere:
        return f" (did you mean {elsewhere!r}? {name} is another library's name for it)"
    close = closest(name, TERMS)
    return f" (did you mean {close!r}?)" if close else ""
