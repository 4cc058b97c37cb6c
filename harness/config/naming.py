"""Member names and the training seed of each repeat: the one place that makes and splits
`unet@2`.

With `train.repeats: R`, model `unet` is trained R times as members `unet@1` .. `unet@R`. Repeat r
is a whole training run of its own: its training seed is `seed + r - 1`, from which come its
initial weights, its data order and its augmentation draws. So `unet@2` of a run with `seed: 0`
is exactly `unet` of a one-repeat run with `seed: 1`, and repeat 1 is the one-repeat run itself.
"""

from __future__ import annotations

REPEAT_SEPARATOR = "@"  # not allowed in model names, so repeat members never collide with a model


def member_name(model: str, repeat: int, repeats: int) -> str:
    """The member trained as repeat `repeat` (1-based) of `model`; with one repeat, the model's name."""
    return model if repeats == 1 else f"{model}{REPEAT_SEPARATOR}{repeat}"


def model_of(member: str) -> str:
    """`unet@2` -> `unet`; a name without a repeat is its own model."""
    return member.split(REPEAT_SEPARATOR, 1)[0]


def repeat_of(member: str) -> int:
    """`unet@2` -> 2; a name without a repeat is repeat 1."""
    _, _, repeat = member.partition(REPEAT_SEPARATOR)
    return int(repeat) if repeat else 1


def training_seed(seed: int, repeat: int) -> int:
    """The training seed of repeat `repeat` (1-based) of a run whose `seed:` is `seed`."""
    return seed + repeat - 1


def repeat_facts(member: str, seed: int) -> dict[str, str | int]:
    """What a member is among a model's seeds, as trackers record it beside its settings
    (MLflow's params, TensorBoard's hparams), so their tables can group a model's seeds:
    `unet@2` of a run with `seed: 0` -> model unet, repeat 2, training_seed 1."""
    repeat = repeat_of(member)
    return {"model": model_of(member), "repeat": repeat, "training_seed": training_seed(seed, repeat)}
