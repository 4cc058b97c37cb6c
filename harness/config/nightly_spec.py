"""`output.nightly`: which summary.csv columns `harness nightly` watches, by how much each may get
worse, and how its runs are kept (pure schema; what a night does with them: harness.nights)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from harness.config.recipes import Strict


class ThresholdSpec(Strict):
    """How much worse a metric may get before `harness nightly` calls it a regression: by an
    absolute amount (`abs: 0.02` of IoU) or relative to the earlier value (`rel: 0.10` = 10%)."""

    abs: Annotated[float, Field(ge=0)] | None = None
    rel: Annotated[float, Field(ge=0)] | None = None
    # None: known from the metric's name (IoU, F1, images/s up; losses, ms/step down).
    higher_is_better: bool | None = None
    # True: a change beyond the threshold counts only if it is beyond noise too: where both runs
    # scored the same images, the 95% interval of tonight minus then (`harness compare --pairs`,
    # each model against itself) lies wholly on the bad side of 0; else the earlier value lies
    # outside tonight's 95% interval (summary.csv <metric>_low/_high). With one training seed
    # those intervals cover image noise only; with repeats, training randomness too.
    beyond_noise: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> "ThresholdSpec":
        if (self.abs is None) == (self.rel is None):
            raise ValueError("give exactly one of 'abs' (an amount) or 'rel' (a fraction, 0.1 = 10%)")
        return self


def default_thresholds() -> dict[str, ThresholdSpec]:
    return {"val_iou": ThresholdSpec(abs=0.02), "best_val_loss": ThresholdSpec(rel=0.10)}


class NightlySpec(Strict):
    """`harness nightly`: which summary.csv columns are watched, and how runs are kept."""

    # summary.csv column -> threshold. Timing (ms_per_step) is not watched unless you add it:
    # it depends on the machine's load as much as on your code.
    thresholds: dict[str, ThresholdSpec] = Field(default_factory=default_thresholds)
    # Checkpoints of the newest N nightly runs (and of the pinned baseline) are kept; older runs
    # keep their tables, plots, exported models and history rows.
    keep_checkpoints_of_runs: Annotated[int, Field(ge=1, le=10_000)] = 3
    # A "night" runs from this local hour to the same hour the next day, so a run started at
    # 23:50 and resumed at 00:20 is the same night.
    night_starts_at_hour: Annotated[int, Field(ge=0, le=23)] = 12
