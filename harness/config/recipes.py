"""Training recipes a config names: learning-rate schedules and early stopping (pure schema)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from harness.config.metrics import WATCHABLE

# Validation context of a config harness already ran with (a run's config.yaml, a group's share):
# a combination refused since is kept as it was, so that older runs stay readable and resumable.
ACCEPTED = "accepted"


def not_read_by(chosen: str, read_by: dict[str, tuple[str, ...]]) -> frozenset[str]:
    """The settings of `read_by` (setting -> who reads it) that `chosen` (a data source, an
    optimizer) does not read: left out where a run's settings are listed, as they changed nothing."""
    return frozenset(name for name, readers in read_by.items() if chosen not in readers)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def unread_settings(self, chosen: str, read_by: dict[str, tuple[str, ...]], info: ValidationInfo, instead: dict[str, str] | None = None, called: str = "") -> list[str]:
        """Settings given (anything but their default) that `chosen` (a data source, an optimizer)
        does not read: each would be ignored without a word. `read_by`: setting -> who reads it;
        `called`: what `chosen` is, in the message ("source")."""
        if (info.context or {}).get(ACCEPTED):
            return []
        fields = type(self).model_fields
        problems = []
        for name, readers in read_by.items():
            if chosen not in readers and getattr(self, name) != fields[name].default:
                hint = f" ({chosen} takes {instead[name]})" if instead and name in instead else ""
                problems.append(f"{name}: {called}{' ' if called else ''}{chosen} does not read it, only {', '.join(readers)}{hint}")
        return problems


class ScheduleSpec(Strict):
    """`optimizer.schedule`: the learning rate as a function of the step (harness.core.schedules),
    with an optional linear warmup. Durations in steps or in epochs (converted to steps here)."""

    name: Literal["constant", "cosine", "polynomial", "piecewise"] = "constant"
    warmup_steps: Annotated[int, Field(ge=0)] | None = None
    warmup_epochs: Annotated[float, Field(ge=0)] | None = None
    # cosine, polynomial: decay over this long after the warmup (default: the rest of the run)
    decay_steps: Annotated[int, Field(ge=1)] | None = None
    decay_epochs: Annotated[float, Field(gt=0)] | None = None
    floor: Annotated[float, Field(ge=0, le=1)] = 0.0  # the last learning rate, as a fraction of the first
    power: Annotated[float, Field(gt=0)] = 0.9  # polynomial
    # piecewise: at each boundary the learning rate is multiplied by its factor
    boundaries_steps: list[Annotated[int, Field(ge=1)]] | None = None
    boundaries_epochs: list[Annotated[float, Field(gt=0)]] | None = None
    factors: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> "ScheduleSpec":
        problems = [f"give {what}_steps or {what}_epochs, not both" for what in ("warmup", "decay", "boundaries")
                    if getattr(self, f"{what}_steps") is not None and getattr(self, f"{what}_epochs") is not None]
        boundaries = self.boundaries_steps or self.boundaries_epochs or []
        if self.name == "piecewise" and (not boundaries or len(self.factors) != len(boundaries)):
            problems.append(f"piecewise: one factor per boundary (boundaries_steps or boundaries_epochs), got {len(boundaries)} boundaries and {len(self.factors)} factors")
        if list(boundaries) != sorted(boundaries):
            problems.append(f"boundaries must increase, got {list(boundaries)}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def in_steps(self, steps_per_epoch: int, total_steps: int) -> "ScheduleSpec":
        """The same schedule with every duration in steps (the only place epochs become steps)."""
        def steps(given: int | None, epochs: float | None, default: int) -> int:
            return given if given is not None else (round(epochs * steps_per_epoch) if epochs is not None else default)

        warmup = steps(self.warmup_steps, self.warmup_epochs, 0)
        boundaries = self.boundaries_steps or [round(e * steps_per_epoch) for e in self.boundaries_epochs or []]
        return self.model_copy(update={
            "warmup_steps": warmup, "warmup_epochs": None, "decay_epochs": None, "boundaries_epochs": None,
            "decay_steps": steps(self.decay_steps, self.decay_epochs, max(1, total_steps - warmup)), "boundaries_steps": boundaries,
        })


class EarlyStoppingSpec(Strict):
    """`train.early_stopping`: a member whose validation score stops improving is frozen (no more
    updates, no more rows) with status `stopped`; the others go on exactly as before."""

    metric: Literal[WATCHABLE] = "val_iou"  # type: ignore[valid-type]
    patience: Annotated[int, Field(ge=1, le=1000)] = 3  # evaluations without improvement
    min_delta: Annotated[float, Field(ge=0)] = 0.0  # an improvement must be larger than this


class RaceSpec(Strict):
    """`train.race`: successive halving. At the end of each rung's epoch the members still training
    are ranked by `metric`; those below the cut are dropped (status `dropped`) and the fused step
    is rebuilt without them, so the rest of the run spends nothing on them."""

    rungs: list[Annotated[int, Field(ge=1)]]  # epochs
    keep: Annotated[float, Field(gt=0, lt=1)] = 0.5  # the fraction of models kept at each rung
    metric: Literal[WATCHABLE] = "val_iou"  # type: ignore[valid-type]

    def rung_steps(self, steps_per_epoch: int) -> list[int]:
        """The steps after which the rungs cut, in order."""
        return [epoch * steps_per_epoch for epoch in self.rungs]

    @model_validator(mode="after")
    def _increasing(self) -> "RaceSpec":
        if not self.rungs or self.rungs != sorted(set(self.rungs)):
            raise ValueError(f"rungs: one or more epochs in increasing order, got {self.rungs}")
        return self


def models_kept(keep: float, models: int) -> int:
    """How many of `models` a race's rung keeps: `ceil(keep x models)`, at least one (the race
    keeps more where models tie with the last one kept)."""
    return max(1, math.ceil(keep * models))
