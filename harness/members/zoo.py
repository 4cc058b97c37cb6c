"""Building the models a config names (see `catalog` for the names and their size rules).

segmentation-models architectures are built with `encoder_weights=None`: nothing is ever
downloaded; a local weights file may be loaded. Users' factories (`package.module:function`) are
imported here, at build time, never while a config is only read.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any, Callable

from harness.errors import ConfigError
from harness.config.catalog import BUILTINS, SM_ARCHS, SM_DEFAULT_BACKBONE, input_multiple, weights_paths


def load_factory(path: str) -> Callable[..., Any]:
    """Import a user's factory `package.module:function` (this runs the user's code)."""
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


def code_input_multiple(arch: str, options: dict[str, Any]) -> int:
    """The input multiple, a user factory's own (`input_multiple` attribute) included."""
    if arch in SM_ARCHS or arch in BUILTINS:
        return input_multiple(arch, options)
    try:
        return int(getattr(load_factory(arch), "input_multiple", 1))
    except (ImportError, AttributeError, TypeError, ValueError):
        return 1


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
    elif arch in BUILTINS:
        from harness.members import builtin_models

        model = getattr(builtin_models, arch)(input_shape, classes, activation, **options)
    else:
        kwargs = dict(options)
        if backbone is not None:
            kwargs["backbone"] = backbone
        model = load_factory(arch)(input_shape=input_shape, classes=classes, activation=activation, **kwargs)
        _build_subclassed(model, input_shape)
    if weights is not None:
        _load_weights(model, weights, f"{arch}{f' ({backbone})' if backbone else ''} for {classes} class(es) on {input_shape[-1]}-channel images")
    return model


def _build_subclassed(model, input_shape) -> None:
    """A subclassed model (a `keras.Model` with its own `call`) has no variables until it is first
    called: create them now, by one eager call on a batch of zeros, so that its parameters can be
    counted, its optimizer's slots made and its weights checkpointed and restored before the fused
    step is traced (a tf.function may not create variables after its first trace). The call runs
    in inference mode: no batch statistics are updated, no dropout draws a number."""
    if getattr(model, "built", True):
        return
    from harness.core.backend import import_tf

    tf = import_tf()
    model(tf.zeros((1, *input_shape)), training=False)


def _build_sm(arch, backbone, options, input_shape, classes, activation):
    builder = getattr(import_segmentation_models(), arch)
    kwargs = {"encoder_weights": None, **options}
    try:
        return builder(backbone or SM_DEFAULT_BACKBONE, input_shape=input_shape, classes=classes, activation=activation, **kwargs)
    except TypeError as exc:  # an option the architecture does not take
        raise ConfigError(f"{arch}: bad option in 'options': {exc}") from None


def weights_digest(path: Path) -> str:
    """A fingerprint of a `weights:` path's content: the file, or a TensorFlow checkpoint's index
    and data shards (what load_weights reads). Read whole: 57 MB for a resnet18 Unet, about 0.1 s."""
    digest = hashlib.sha256()
    for file in weights_paths(path):
        with open(file, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def _load_weights(model, path: Path, built: str) -> None:
    try:
        model.load_weights(str(path))
    except Exception as exc:  # h5py/keras raise many kinds; all mean "this file does not fit"
        raise ConfigError(f"cannot load weights file {str(path)!r} into {built}: {exc} (the file must be of the same "
                          "architecture, backbone, classes and image channels)") from None


def import_segmentation_models():
    """Import segmentation-models with tf_keras selected, without its import banner on stdout."""
    import contextlib
    import io

    from harness.core.backend import import_tf

    import_tf()
    with contextlib.redirect_stdout(io.StringIO()):
        import segmentation_models as sm
    return sm
