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


def repeats_span(members: list[str]) -> str:
    """Members of one model as one label: `unet@1`..`unet@20` -> `unet@1-20`, `unet@1`, `unet@3`,
    `unet@4` -> `unet@1,3-4`; a single member is its own name (progress and placement lines of a
    run with many seeds, one per model instead of one per member)."""
    if len(members) == 1:
        return members[0]
    repeats = sorted(repeat_of(m) for m in members)
    spans, start = [], repeats[0]
    for previous, current in zip(repeats, repeats[1:] + [None]):
        if current == previous + 1:  # the span goes on (None, after the last, ends it)
            continue
        spans.append(f"{start}" if start == previous else f"{start}-{previous}")
        start = current
    return f"{model_of(members[0])}{REPEAT_SEPARATOR}{','.join(spans)}"


def seeds_of_each_model(members) -> dict[str, list[str]]:
    """Each model's members, models and members in the order given: `unet@1, fcn@1, unet@2` ->
    {unet: [unet@1, unet@2], fcn: [fcn@1]}; a name without a repeat is its model's one member."""
    by_model: dict[str, list[str]] = {}
    for member in members:
        by_model.setdefault(model_of(member), []).append(member)
    return by_model


def members_said(members: list[str]) -> str:
    """Members as a reader takes them in: each model's seeds as one span, in the order given
    (`unet@1, unet@2, unet@3, fcn@2` -> `unet@1-3, fcn@2`)."""
    return ", ".join(repeats_span(group) for group in seeds_of_each_model(members).values())
