"""What a config may name as a model, each model's input-size rule and the files a weights path
stands for: pure data and checks.

Nothing here imports TensorFlow or the code a config names, so a config is checked in a fraction
of a second and reading a run directory never runs its code. Three families:
  * segmentation-models architectures (Unet, Linknet, FPN, PSPNet) with their backbones;
  * small built-in models (`harness.members.builtin_models`), fast enough for tests and smoke runs;
  * any user factory named `package.module:function` (only its name is checked here; the zoo
    imports it when the run builds it, see `harness.members.registry.check_code`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from harness.errors import closest, did_you_mean

SM_ARCHS = ("Unet", "Linknet", "FPN", "PSPNet")
SM_DEFAULT_BACKBONE = "resnet18"
# segmentation-models is pinned to 1.0.1; a test checks this list against its own registry.
SM_BACKBONES = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "seresnet18", "seresnet34", "seresnet50", "seresnet101", "seresnet152",
    "seresnext50", "seresnext101", "senet154", "resnext50", "resnext101",
    "vgg16", "vgg19", "densenet121", "densenet169", "densenet201",
    "inceptionresnetv2", "inceptionv3", "mobilenet", "mobilenetv2",
    "efficientnetb0", "efficientnetb1", "efficientnetb2", "efficientnetb3",
    "efficientnetb4", "efficientnetb5", "efficientnetb6", "efficientnetb7",
)  # fmt: skip

# Each architecture's own options (segmentation-models 1.0.1's keyword arguments beyond the ones
# harness sets: backbone, input shape, classes, activation, weights); a test checks them against its
# signatures. Its builders pass any other name on to keras_applications, which refuses it only when
# the network is built, as "('Invalid keyword argument: %s', 'decoder_filter')".
_SM_ENCODER = ("encoder_freeze", "encoder_features", "encoder_weights")  # encoder_weights: null only (below)
_SM_DECODER = ("decoder_block_type", "decoder_filters", "decoder_use_batchnorm")
SM_OPTIONS = {
    "Unet": _SM_ENCODER + _SM_DECODER,
    "Linknet": _SM_ENCODER + _SM_DECODER,
    "FPN": _SM_ENCODER + ("pyramid_block_filters", "pyramid_use_batchnorm", "pyramid_aggregation", "pyramid_dropout"),
    "PSPNet": ("encoder_freeze", "encoder_weights", "downsample_factor", "psp_conv_filters", "psp_pooling_type", "psp_use_batchnorm", "psp_dropout"),
}

# Backbones that refuse a smaller input whatever its multiple (their own `min_size`); the others
# take any side that is a multiple of 32.
SM_MIN_SIDE = {"inceptionv3": 75}

# name -> (input multiple, options it takes, what it is)
BUILTINS: dict[str, tuple[int, frozenset[str], str]] = {
    "tiny_fcn": (1, frozenset({"width", "batchnorm"}), "three 3x3 convolutions, no downsampling (batchnorm: false leaves out BatchNormalization)"),
    "tiny_unet": (4, frozenset({"width"}), "two-level U-Net with skip connections"),
    "tiny_deconv": (4, frozenset({"width"}), "strided-conv encoder, transpose-conv decoder"),
    "pix2pix_generator": (8, frozenset({"width", "depth", "dropout"}), "pix2pix U-Net generator (kind: gan)"),
    "patchgan": (4, frozenset({"width", "depth"}), "PatchGAN discriminator (gan.discriminator)"),
    "conv_autoencoder": (16, frozenset({"width", "depth"}), "a convolutional autoencoder, four levels (kind: autoencoder)"),
    "small_autoencoder": (4, frozenset({"width"}), "a two-level autoencoder (kind: autoencoder)"),
}
ALL_ARCHS = SM_ARCHS + tuple(BUILTINS)
FACTORY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_factory(arch: str) -> bool:
    return ":" in arch


# The module Python names a running script (and a notebook's kernel); `__mp_main__` is its name
# in a spawned process. A config.yaml naming it names code no other process can import.
SCRIPT_MODULES = ("__main__", "__mp_main__")


def script_module_problem(path: str, what: str) -> str | None:
    """A factory or kind named in the script or notebook that runs harness (`__main__:f`): it
    would build tonight, in that process, but the run's config.yaml must name code that `harness
    resume`, `report`, `nightly` and a group's own process can import again, and those cannot."""
    module, _, name = path.partition(":")
    if module not in SCRIPT_MODULES:
        return None
    return (f"{what} {path!r} is in the script or notebook running harness ({module}), which no other process can "
            f"import (harness resume, report and nightly read the run's config.yaml in one of their own): put {name} in a "
            f"module of its own, e.g. mymodels.py beside the script, and name it 'mymodels:{name}' (docs/members.md)")


def check_spec(arch: str, backbone: str | None, options: dict[str, Any]) -> list[str]:
    """Problems with a model's arch/backbone/options, found from names alone."""
    if arch in SM_ARCHS:
        if backbone is not None and backbone not in SM_BACKBONES:
            return [f"unknown backbone {backbone!r} for {arch}{did_you_mean(backbone, SM_BACKBONES)}"]
        if unknown := _unknown_options(arch, options, SM_OPTIONS[arch]):
            return [unknown]
        if options.get("encoder_weights") is not None:
            # segmentation-models would fetch them from the internet at build time: a run must
            # work offline, and one that cannot reach the internet failed there, mid-run.
            return [f"options.encoder_weights {options['encoder_weights']!r}: segmentation-models would download these weights, "
                    "and harness downloads nothing (every encoder starts from random weights); to start from pretrained "
                    "weights, save them once as a file and give it as `weights: PATH` (docs/members.md, \"Pretrained weights\")"]
        return []
    if arch in BUILTINS:
        problems = []
        if backbone is not None:
            problems.append(f"built-in model {arch!r} takes no backbone (got {backbone!r})")
        if unknown := _unknown_options(f"built-in model {arch!r}", options, BUILTINS[arch][1]):
            problems.append(unknown)
        return problems
    if is_factory(arch):
        if not FACTORY_PATTERN.match(arch):
            return [f"factory {arch!r} must look like package.module:function (a module's name, not its file's)"]
        return [problem] if (problem := script_module_problem(arch, "factory")) else []
    return [f"unknown arch {arch!r}{did_you_mean(arch, ALL_ARCHS)}, or a factory 'package.module:function'"]


def _unknown_options(network: str, options: dict[str, Any], allowed) -> str | None:
    unknown = sorted(set(options) - set(allowed))
    if not unknown:
        return None
    close = closest(unknown[0], allowed) if len(unknown) == 1 else None
    return f"{network} takes only the options {sorted(allowed)}, not {unknown}" + (f"; did you mean {close!r}?" if close else "")


def input_multiple(arch: str, options: dict[str, Any], factory_multiple: int = 1) -> int:
    """Each side of the input must be a multiple of this number for the model to build. A user
    factory's rule is its `input_multiple` attribute, which only the zoo can read (by importing
    it): callers that may not import code pass nothing and check it later."""
    if arch == "PSPNet":
        return 6 * int(options.get("downsample_factor", 8))
    if arch in SM_ARCHS:
        return 32
    if arch in BUILTINS:
        if "depth" in options:  # one halving of the image per level
            return 2 ** int(options["depth"])
        return BUILTINS[arch][0]
    return factory_multiple


def min_side(arch: str, backbone: str | None) -> int:
    """The smallest side this network builds with (1: no rule beyond its multiple)."""
    if arch not in SM_ARCHS:
        return 1
    return SM_MIN_SIDE.get(backbone or SM_DEFAULT_BACKBONE, 1)


def smallest_side(multiple: int, least: int = 1) -> int:
    """The smallest side that is a multiple of `multiple` and at least `least`."""
    return max(multiple, math.ceil(least / multiple) * multiple)


def check_input_size(multiples: dict[str, tuple[str, int]], size: tuple[int, int], least: int = 1) -> list[str]:
    """Name each model (name -> (arch, multiple)) that cannot take `size`, and the nearest size
    every model can take (no side under `least`, the models' largest `min_side`)."""
    common = math.lcm(*(m for _, m in multiples.values()))
    problems = [
        f"data.image_size: model {name!r} ({arch}) needs each side to be a multiple of {m}, got {size[0]}x{size[1]}"
        for name, (arch, m) in multiples.items()
        if any(side % m for side in size)
    ]
    if problems:
        nearest = tuple(max(smallest_side(common, least), round(side / common) * common) for side in size)
        problems.append(
            f"data.image_size: the nearest size that suits every model is {nearest[0]}x{nearest[1]} (sides multiple of {common})"
        )
    return problems


def describe() -> list[tuple[str, str, str]]:
    """Rows (name, family, details) for `harness models`."""
    rows = []
    for arch in SM_ARCHS:
        rule = "sides multiple of 6 x downsample_factor (48)" if arch == "PSPNet" else "sides multiple of 32"
        rows.append((arch, "segmentation-models", f"{rule} (inceptionv3: 96 or more); backbone default {SM_DEFAULT_BACKBONE}; "
                                                 f"options: {', '.join(o for o in SM_OPTIONS[arch] if o != 'encoder_weights')}"))
    for name, (multiple, options, summary) in BUILTINS.items():
        rows.append((name, "built-in", f"{summary}; sides multiple of {multiple}; options: {', '.join(sorted(options))}"))
    rows.append(("package.module:function", "your factory", "called as f(input_shape, classes, activation, **options)"))
    return rows


def weights_paths(path: Path) -> list[Path]:
    """The files a model's `weights:` stands for, as tf_keras's load_weights reads them: the file
    itself (.h5, .keras), or a TensorFlow checkpoint's index and data shards when it is the prefix
    `save_weights("unet")` wrote (unet.index, unet.data-*); none when there is neither."""
    if path.is_file():
        return [path]
    index = path.with_name(path.name + ".index")
    return [index, *sorted(path.parent.glob(f"{path.name}.data-*"))] if index.is_file() else []
