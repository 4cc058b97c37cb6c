"""The models a bench measures: `tiny` (checks that it works), `standard`, `quickstart`."""

from __future__ import annotations

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


