"""Building each distinct user-written model once before a run directory exists.

A user's factory or member kind runs for the first time when its member is built. If it raises,
or returns a model whose output cannot be compared with the masks, the user should hear it as an
error in their code (exit 2: the member, the factory, their own traceback lines) before anything
is written or traced, not as an internal error after a minute of tracing. Built-in architectures
are harness's own and are not built twice, unless given `options`: their values are checked only
by the builder (segmentation-models' `decoder_block_type: bogus`, a tiny model's `width: -3`), and
one it refuses is the config's error (exit 2), not a bug in harness. One trial per distinct (kind,
arch, backbone, options, weights).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from harness.config import catalog
from harness.config.schema import ExperimentConfig, ModelSpec
from harness.core.backend import import_keras
from harness.errors import ConfigError, UserCodeError, user_frames, user_traceback, what_was_raised
from harness.members import zoo
from harness.members.registry import BUILTIN_KINDS, member_class


def is_user_code(spec: ModelSpec) -> bool:
    return catalog.is_factory(spec.arch) or spec.kind not in BUILTIN_KINDS


def _identity(spec: ModelSpec) -> str:
    gan = spec.gan.model_dump() if spec.gan else None  # a discriminator of its own options is another network
    return json.dumps([spec.kind, spec.arch, spec.backbone, spec.options, str(spec.weights), gan], sort_keys=True, default=str)


def trial_build(config: ExperimentConfig) -> None:
    """Build each distinct user-written model, and each network given options, once;
    UserCodeError listing every user model that fails, else ConfigError every option that does."""
    keras = import_keras()
    problems, refused, seen = [], [], set()
    for i, spec in enumerate(config.models):
        if _identity(spec) in seen:
            continue
        seen.add(_identity(spec))
        if is_user_code(spec):
            problems += _try_one(i, spec, config)
        elif spec.options or (spec.gan and spec.gan.discriminator_options):
            refused += _try_options(i, spec, config)
    keras.backend.clear_session()  # the trial's layers leave no trace in the names the run's models get
    if problems:
        raise UserCodeError("your model code failed before training started (nothing was written):", problems)
    if refused:
        raise ConfigError("a model does not build with the options it is given (nothing was written):", refused)


def blame_traced_failure(exc: BaseException, config: ExperimentConfig) -> UserCodeError | None:
    """A failure of the first trace of the fused step (what the trial does not run: a kind's
    `train_step`, a model's `call`) whose frames are in a file of a member's own code: the
    user's error, naming each member whose code it is; None when no member's code is in it."""
    raised_in = {str(Path(frame[0]).resolve()) for frame in user_frames(exc)}
    problems = [
        f"models.{i}({spec.name}): {_code_of(spec)} raised {what_was_raised(exc)}"
        for i, spec in enumerate(config.models)
        if is_user_code(spec) and raised_in & _source_files(spec)
    ]
    if not problems:
        return None
    return UserCodeError("your model code failed while the first step was traced (the new run folder was removed):",
                         problems + user_traceback(exc))


def _code_of(spec: ModelSpec) -> str:
    return spec.arch if catalog.is_factory(spec.arch) else f"kind {spec.kind}"


def _source_files(spec: ModelSpec) -> set[str]:
    """The files of a member's own code: its kind's classes that are not harness's, its factory."""
    code = [cls for cls in member_class(spec.kind).__mro__ if cls not in BUILTIN_KINDS.values() and cls is not object]
    if catalog.is_factory(spec.arch):
        code.append(zoo.load_factory(spec.arch))
    files = set()
    for obj in code:
        try:
            files.add(str(Path(inspect.getsourcefile(obj) or "").resolve()))
        except TypeError:  # a builtin or a class made at run time: no file to match
            pass
    return files


def _build(spec: ModelSpec, config: ExperimentConfig):
    """The member as the run builds it, on no device in particular, in float32."""
    return member_class(spec.kind).build(spec, config.data, config.seed, config.train.batchnorm_momentum, None, "float32")


def _try_one(i: int, spec: ModelSpec, config: ExperimentConfig) -> list[str]:
    where = f"models.{i}({spec.name})"
    code = _code_of(spec)
    try:
        member = _build(spec, config)
    except Exception as exc:  # anything the user's code raises is theirs to see
        return [f"{where}: {code} raised {type(exc).__name__}: {exc}", *user_traceback(exc)]
    if spec.predicts_masks and member.task == "segmentation":
        return _shape_problems(where, code, member.model, config) or _range_problems(where, code, member.model, spec, config)
    return []


def _try_options(i: int, spec: ModelSpec, config: ExperimentConfig) -> list[str]:
    network = f"{spec.arch} ({spec.backbone})" if spec.backbone else spec.arch
    given = f"options {spec.options}" if spec.options else ""
    if spec.gan and spec.gan.discriminator_options:
        given = ", ".join(filter(None, [given, f"gan.discriminator_options {spec.gan.discriminator_options}"]))
    try:
        _build(spec, config)
    except ConfigError as exc:  # an option the builder does not take, a weights file that does not fit: said already
        return [f"models.{i}({spec.name}): {exc}"]
    except Exception as exc:  # the builder's own check of a value: its message names the value
        return [f"models.{i}({spec.name}): {network} with {given}: {type(exc).__name__}: {exc}"]
    return []


def _shape_problems(where: str, code: str, model, config: ExperimentConfig) -> list[str]:
    """The model must map (batch, H, W, channels) images to (batch, H, W, classes) masks."""
    height, width = config.data.image_size
    expected = (None, height, width, config.data.classes)
    images = (None, *config.data.input_shape)
    takes = getattr(model, "input_shape", None) if model.built else None  # a functional model's; a subclassed one takes what it is given
    if isinstance(takes, tuple) and (len(takes) != 4 or any(t is not None and t != i for t, i in zip(takes, images))):
        return [f"{where}: {code} returns a model that takes images of shape {takes}, but the images have shape {images} "
                f"(batch, height, width, data.channels): build its input from the input_shape the factory is given"]
    try:
        got = tuple(model.output_shape)
    except (AttributeError, RuntimeError):  # a subclassed model: its `call` traced on a symbolic batch
        try:
            got = tuple(model.compute_output_shape((None, *config.data.input_shape)))
        except Exception:  # a `call` that cannot run on a symbolic batch: the step's trace will tell
            return []
    if isinstance(got[0], tuple):
        return [f"{where}: {code} returns a model with {len(got)} outputs {list(got)}; harness needs one output of shape {expected}"]
    if len(got) != 4 or any(e is not None and g != e for g, e in zip(got, expected)):
        return [f"{where}: {code} returns a model whose output has shape {got}, but the masks have shape {expected} "
                f"(batch, height, width, data.classes): its output must be the size of its input, one channel per class"]
    return []


def _range_problems(where: str, code: str, model, spec: ModelSpec, config: ExperimentConfig) -> list[str]:
    """harness's losses and scores take per-pixel probabilities (docs/members.md). A factory that
    leaves out the activation it is given returns logits: the cross-entropy terms clip them to
    [0, 1] (no gradient beyond), Dice and the 0.5 threshold read them as probabilities they are
    not, and such a model scored 0 without a word (a 2-epoch smoke run). One forward pass on an image of
    uniform noise (inference mode) shows it. A kind of the user's own scores its model its own way
    and is not checked; a model whose outputs happen to fall inside [0, 1] passes (no false alarm)."""
    if spec.kind not in BUILTIN_KINDS:
        return []
    import numpy as np

    image = np.random.default_rng(0).uniform(size=(1, *config.data.input_shape)).astype("float32")
    try:
        out = np.asarray(model(image, training=False), dtype="float64")
    except Exception as exc:  # its shapes fit, yet one image of the data's shape does not go through: the user's to see
        return [f"{where}: {code} returns a model that fails on one image of shape {image.shape}: {what_was_raised(exc)}", *user_traceback(exc)]
    low, high = float(np.nanmin(out)), float(np.nanmax(out))
    activation = zoo.output_activation(config.data.classes)
    if not np.isfinite(out).all() or low < -1e-6 or high > 1 + 1e-6:
        return [f"{where}: {code} returns values from {low:.4g} to {high:.4g} on an image of noise, but harness's losses and "
                f"scores take probabilities in [0, 1]: end the model with the activation the factory is given ({activation!r} here)"]
    if config.data.classes > 1 and (drift := float(np.abs(out.sum(axis=-1) - 1).max())) > 1e-3:
        return [f"{where}: {code} returns class probabilities that do not sum to 1 per pixel (off by up to {drift:.3g}): "
                f"with data.classes {config.data.classes}, end the model with the activation the factory is given ('softmax')"]
    return []
