"""Resolving what a config names into code, and building the members from it.

The config checks names only; this is where the code a config names is imported: users' model
factories (`arch: package.module:function`) and member kinds (`kind: package.module:Class`).
`harness run`, `resume` and `nightly` call `check_code` before a run directory exists (bad code is
exit 2 with every problem listed); `report`, `compare`, `runs` and `history` never call it, so
reading a run directory runs none of the code it names.
"""

from __future__ import annotations

import importlib
import math

from harness.config.metrics import metric_of
from harness.config.naming import repeat_of
from harness.config.schema import DataSpec, ExperimentConfig, ModelSpec
from harness.core.member_step import on_device
from harness.errors import ConfigError
from harness.config import catalog
from harness.members import zoo
from harness.members.base import Member
from harness.members.kinds import AutoencoderMember, GanMember

BUILTIN_KINDS: dict[str, type[Member]] = {"supervised": Member, "gan": GanMember, "autoencoder": AutoencoderMember}


def member_class(kind: str) -> type[Member]:
    """The class of a kind: a built-in one, or a user's `package.module:Class` (imported here)."""
    if kind in BUILTIN_KINDS:
        return BUILTIN_KINDS[kind]
    problems = _kind_problems(kind)
    if problems:
        raise ConfigError("cannot use a member kind:", problems)
    module_name, _, attr = kind.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _watched_metric_problems(config: ExperimentConfig) -> list[str]:
    """Every model's kind reports the validation score early stopping or the race watches (an
    autoencoder reports a reconstruction loss only: a KeyError at the first rung otherwise)."""
    problems = []
    for key, spec in (("early_stopping", config.train.early_stopping), ("race", config.train.race)):
        for i, model in enumerate(config.models if spec is not None else ()):
            reported = member_class(model.kind).val_metrics
            if metric_of(spec.metric) not in reported:
                problems.append(f"models.{i}({model.name}): kind {model.kind} reports {', '.join(reported)} on validation, "
                                f"not the {spec.metric} train.{key}.metric watches; val_loss is every kind's")
    return problems


def _kind_problems(kind: str) -> list[str]:
    if kind in BUILTIN_KINDS:
        return []
    module_name, _, attr = kind.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return [f"kind {kind!r}: cannot import module {module_name!r}: {exc}"]
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Member)):
        return [f"kind {kind!r} must be a subclass of harness.members.Member"]
    return []


def _factory_problems(arch: str) -> list[str]:
    if not catalog.is_factory(arch):
        return []
    try:
        zoo.load_factory(arch)
    except (ImportError, AttributeError, TypeError) as exc:
        return [str(exc)]
    return []


def input_multiple(config: ExperimentConfig) -> int:
    """Each side of the input must be a multiple of this for every network, users' factories'
    own rules included (this imports them)."""
    return math.lcm(*(zoo.code_input_multiple(arch, options) for _, arch, options in config.networks()))


def check_code(config: ExperimentConfig) -> None:
    """Import every factory and kind the config names; ConfigError listing every problem."""
    problems = []
    for i, spec in enumerate(config.models):
        where = f"models.{i}({spec.name})"
        problems += [f"{where}.arch: {p}" for p in _factory_problems(spec.arch)]
        problems += [f"{where}.kind: {p}" for p in _kind_problems(spec.kind)]
    if not problems and (watched := _watched_metric_problems(config)):
        raise ConfigError("a validation score the run watches is not reported by every model:", watched)
    if not problems and config.data.image_size != "auto":
        multiples = {name: (arch, zoo.code_input_multiple(arch, options)) for name, arch, options in config.networks()}
        problems += catalog.check_input_size(multiples, config.data.image_size, config.least_side())
    if problems:
        raise ConfigError("the code this config names cannot be used:", problems)


def build_member(
    spec: ModelSpec,
    data: DataSpec,
    seed: int,
    batchnorm_momentum: float | None = None,
    device: str | None = None,
    precision: str = "float32",
) -> Member:
    with on_device(device):
        return member_class(spec.kind).build(spec, data, seed, batchnorm_momentum, device, precision)


def with_schedules_in_steps(spec: ModelSpec, config: ExperimentConfig) -> ModelSpec:
    """The spec a member is built from: its schedules' durations in steps."""
    update = {"optimizer": config.optimizer_in_steps(spec.optimizer)}
    if spec.gan is not None:
        update["gan"] = spec.gan.model_copy(update={"discriminator_optimizer": config.optimizer_in_steps(spec.gan.discriminator_optimizer)})
    return spec.model_copy(update=update)


def build_members(config: ExperimentConfig, model_devices: dict[str, str | None] | None = None) -> list[Member]:
    """Every member, each built with its repeat's training seed and fed its repeat's stream."""
    devices = model_devices or {}
    seeds = config.training_seeds()
    members = []
    for spec in config.member_specs():
        stream = repeat_of(spec.name) - 1
        member = build_member(with_schedules_in_steps(spec, config), config.data, seeds[stream], config.train.batchnorm_momentum, devices.get(spec.name), config.placement.precision)
        member.isolate_divergence = config.train.isolate_divergence
        member.stream = stream
        members.append(member)
    return members
