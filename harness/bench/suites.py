"""The models a bench measures: `tiny` (checks that it works), `standard`, `quickstart`; and the
names of its sections, which the command line checks before TensorFlow loads."""

from __future__ import annotations

# What `harness bench` runs when no --section is named, in this order.
DEFAULT_SECTIONS = ("loop", "overhead", "dispatch", "fit", "compile", "scaling", "memory", "placement", "checkpoint",
                    "input", "statistics", "stream", "scale")
# Run only when named (--section; `gpu` also by --gpu): each trains for minutes at full size, or
# needs a GPU.
ON_REQUEST_SECTIONS = ("gpu", "calibration", "calibration_bootstrap", "calibration_images", "repeats", "fixed", "trace", "serving")
SECTIONS = DEFAULT_SECTIONS + ON_REQUEST_SECTIONS


def unknown_sections(names: list[str] | None) -> str | None:
    """The message for section names the bench does not have, or None."""
    unknown = [name for name in names or [] if name not in SECTIONS]
    if not unknown:
        return None
    return f"bench: unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}"

TINY = {
    "name": "bench",
    "seed": 0,
    "data": {"image_size": [32, 32], "train_size": 64, "val_size": 8, "batch_size": 8},
    "models": [{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet"}],
}

# Three built-in models big enough that a step is real work on a CPU, small enough that the whole
# suite takes minutes: the fixed costs the fused step removes (Python, host syncs, the input
# pipeline) are then visible, as they are for small models on a GPU.
STANDARD = {
    "name": "bench",
    "seed": 0,
    "data": {"image_size": [64, 64], "train_size": 256, "val_size": 8, "batch_size": 8},
    "models": [
        {"name": "unet", "arch": "tiny_unet", "options": {"width": 16}},
        {"name": "deconv", "arch": "tiny_deconv", "options": {"width": 16}},
        {"name": "fcn", "arch": "tiny_fcn", "options": {"width": 16}},
    ],
}

QUICKSTART = {
    **STANDARD,
    "data": {"image_size": [96, 96], "train_size": 400, "val_size": 8, "batch_size": 8},
    "models": [{"name": n.lower(), "arch": n} for n in ("Unet", "Linknet", "FPN", "PSPNet")],
}

SUITES = {"tiny": TINY, "standard": STANDARD, "quickstart": QUICKSTART}


