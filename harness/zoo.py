"""The models a config may name, and the input-size rules each one has.

Three families:
  * segmentation-models architectures (Unet, Linknet, FPN, PSPNet) with their backbones, built with
    `encoder_weights=None` (nothing is ever downloaded; a local weights file may be loaded);
  * small built-in models, fast enough for tests and smoke runs;
  * any user factory named `package.module:function`.

Checks (`check_spec`, `check_input_size`) run at config time and import no TensorFlow, so a bad
config is reported in a fraction of a second.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

SM_ARCHS = ("Unet", "Linknet", "FPN", "PSPNet")

# segmentation-models is pinned to 1.0.1; tests check this list against its own registry so the
# config check never needs to import TensorFlow.
SM_BACKBONES = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "seresnet18", "seresnet34", "seresnet50", "seresnet101", "seresnet152",
    "seresnext50", "seresnext101", "senet154", "resnext50", "resnext101",
    "vgg16", "vgg19", "densenet121", "densenet169", "densenet201",
    "inceptionresnetv2", "inceptionv3", "mobilenet", "mobilenetv2",
    "efficientnetb0", "efficientnetb1", "efficientnetb2", "efficientnetb3",
    "efficientnetb4", "efficientnetb5", "efficientnetb6", "efficientnetb7",
)  # fmt: skip
SM_DEFAULT_BACKBONE = "resnet18"

FACTORY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Builtin:
    build: Callable[..., Any]
    input_multiple: int
    summary: str


def _builtins() -> dict[str, Builtin]:
    from . import builtin_models as bm

    return {
        "tiny_fcn": Builtin(bm.tiny_fcn, 1, "three 3x3 convolutions, no downsampling"),
        "tiny_unet": Builtin(bm.tiny_unet, 4, "two-level U-Net with skip connections"),
        "tiny_deconv": Builtin(bm.tiny_deconv, 4, "strided-conv encoder, transpose-conv decoder"),
        "pix2pix_generator": Builtin(bm.pix2pix_generator, 8, "pix2pix U-Net generator (kind: gan)"),
        "patchgan": Builtin(bm.patchgan, 4, "PatchGAN discriminator (gan.discriminator)"),
        "conv_autoencoder": Builtin(bm.conv_autoencoder, 16, "seed 002's convolutional autoencoder (kind: autoencoder)"),
        "small_autoencoder": Builtin(bm.small_autoencoder, 4, "a two-level autoencoder (kind: autoencoder)"),
    }


BUILTIN_NAMES = ("tiny_fcn", "tiny_unet", "tiny_deconv", "pix2pix_generator", "patchgan", "conv_autoencoder", "small_autoencoder")
BUILTIN_OPTIONS = {"pix2pix_generator": {"width", "depth", "dropout"}, "patchgan": {"width", "depth"}, "conv_autoencoder": {"width", "depth"}}
ALL_ARCHS = SM_ARCHS + BUILTIN_NAMES


# ---------------------------------------------------------------------------------------------
# Config-time checks


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint}; choose one of {', '.join(choices)}"


def check_spec(arch: str, backbone: str | None, options: dict[str, Any]) -> list[str]:
    """Problems with a model's arch/backbone/options, without building anything."""
    if arch in SM_ARCHS:
        if backbone is not None and backbone not in SM_BACKBONES:
            return [f"unknown backbone {backbone!r} for {arch}{_did_you_mean(backbone, SM_BACKBONES)}"]
        return []
    if arch in BUILTIN_NAMES:
        problems = []
        if backbone is not None:
            problems.append(f"built-in model {arch!r} takes no backbone (got {backbone!r})")
        allowed = BUILTIN_OPTIONS.get(arch, {"width"})
        unknown = set(options) - allowed
        if unknown:
            problems.append(f"built-in model {arch!r} takes only the options {sorted(allowed)}, not {sorted(unknown)}")
        return problems
    if ":" in arch:
        if not FACTORY_PATTERN.match(arch):
            return [f"factory {arch!r} must look like package.module:function"]
        try:
            load_factory(arch)
        except (ImportError, AttributeError, TypeError) as exc:
            return [str(exc)]
        return []
    return [
        f"unknown arch {arch!r}{_did_you_mean(arch, ALL_ARCHS)}, or a factory "
        "'package.module:function'"
    ]


def load_factory(path: str) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import module {module_name!r} for factory {path!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise AttributeError(f"module {module_name!r} has no function {attr!r} (factory {path!r})")
    if not callable(factory):
        raise TypeError(f"factory {path!r} is not callable")
    return factory


def input_multiple(arch: str, options: dict[str, Any]) -> int:
    """Each side of the input must be a multiple of this number for the model to build."""
    if arch == "PSPNet":
        return 6 * int(options.get("downsample_factor", 8))
    if arch in SM_ARCHS:
        return 32
    if arch in BUILTIN_NAMES:
        if "depth" in options:  # one halving of the image per level
            return 2 ** int(options["depth"])
        return _builtins()[arch].input_multiple
    if ":" in arch:
        try:
            return int(getattr(load_factory(arch), "input_multiple", 1))
        except (ImportError, AttributeError, TypeError, ValueError):
            return 1
    return 1


def check_input_size(models: list[tuple[str, str, dict]], size: tuple[int, int]) -> list[str]:
    """Name each model that cannot take `size`, and the nearest size every model can take."""
    multiples = {name: input_multiple(arch, options) for name, arch, options in models}
    common = math.lcm(*multiples.values())
    problems = []
    for name, arch, _ in models:
        m = multiples[name]
        bad = [side for side in size if side % m]
        if bad:
            problems.append(
                f"data.image_size: model {name!r} ({arch}) needs each side to be a multiple of {m}, "
                f"got {size[0]}x{size[1]}"
            )
    if problems:
        nearest = tuple(max(common, round(side / common) * common) for side in size)
        problems.append(
            f"data.image_size: the nearest size that suits every model is "
            f"{nearest[0]}x{nearest[1]} (sides multiple of {common})"
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Building


def output_activation(classes: int) -> str:
    return "sigmoid" if classes == 1 else "softmax"


def build_model(
    arch: str,
    backbone: str | None,
    options: dict[str, Any],
    input_shape: tuple[int, int, int],
    classes: int,
    weights: Path | None = None,
    activation: str | None = None,
):
    """Build one tf_keras model that maps images to per-pixel class probabilities (or, for
    autoencoders, `classes` = channels of the reconstructed image)."""
    activation = activation or output_activation(classes)
    if arch in SM_ARCHS:
        model = _build_sm(arch, backbone, options, input_shape, classes, activation)
    elif arch in BUILTIN_NAMES:
        model = _builtins()[arch].build(input_shape, classes, activation, **options)
    else:
        factory = load_factory(arch)
        kwargs = dict(options)
        if backbone is not None:
            kwargs["backbone"] = backbone
        model = factory(input_shape=input_shape, classes=classes, activation=activation, **kwargs)
    if weights is not None:
        _load_weights(model, weights)
    return model


def _build_sm(arch, backbone, options, input_shape, classes, activation):
    from .errors import ConfigError

    sm = import_segmentation_models()
    builder = getattr(sm, arch)
    kwargs = {"encoder_weights": None, **options}
    try:
        return builder(
            backbone or SM_DEFAULT_BACKBONE,
            input_shape=input_shape,
            classes=classes,
            activation=activation,
            **kwargs,
        )
    except TypeError as exc:  # an option the architecture does not take
        raise ConfigError(f"{arch}: bad option in 'options': {exc}") from None


def _load_weights(model, path: Path) -> None:
    from .errors import ConfigError

    try:
        model.load_weights(str(path))
    except Exception as exc:  # h5py/keras raise many kinds; all mean "this file does not fit"
        raise ConfigError(f"cannot load weights file {str(path)!r} into the model: {exc}") from None


def import_segmentation_models():
    """Import segmentation-models with tf_keras selected, without its import banner on stdout."""
    import contextlib
    import io

    from .backend import import_tf

    import_tf()
    with contextlib.redirect_stdout(io.StringIO()):
        import segmentation_models as sm
    return sm


def describe() -> list[tuple[str, str, str]]:
    """Rows (name, kind, details) for `harness models`."""
    rows = []
    for arch in SM_ARCHS:
        rule = "sides multiple of 6 x downsample_factor (48)" if arch == "PSPNet" else "sides multiple of 32"
        rows.append((arch, "segmentation-models", f"{rule}; backbone default {SM_DEFAULT_BACKBONE}"))
    for name, info in _builtins().items():
        rows.append((name, "built-in", f"{info.summary}; sides multiple of {info.input_multiple}"))
    rows.append(("package.module:function", "your factory", "called as f(input_shape, classes, activation, **options)"))
    return rows
