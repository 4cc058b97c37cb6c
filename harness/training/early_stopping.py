"""Early stopping, per member: pure decisions from a member's validation history.

A member stops when none of its last `patience` evaluations beat the best one before them by more
than `min_delta` (Keras's `EarlyStopping` rule, counted in evaluations). The history is rebuilt
from losses.csv on resume, so a resumed run decides exactly as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.config.metrics import column, higher_is_better, metric_of


def should_stop(values: list[float], patience: int, min_delta: float, higher: bool) -> bool:
    if len(values) <= patience:
        return False
    before, recent = values[:-patience], values[-patience:]
    best = max(before) if higher else min(before)
    improved = any((v - best if higher else best - v) > min_delta for v in recent)
    return not improved


@dataclass
class EarlyStopping:
    metric: str  # a validation score: "iou", "f1", "loss"
    patience: int
    min_delta: float
    history: dict[str, list[float]] = field(default_factory=dict)

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(column(self.metric))

    def observe(self, member: str, value: float) -> bool:
        """Record an evaluation; True if the member should stop now."""
        values = self.history.setdefault(member, [])
        values.append(value)
        return should_stop(values, self.patience, self.min_delta, self.higher_is_better)

    def reason(self) -> str:
        return f"{column(self.metric)} has not improved by more than {self.min_delta} in {self.patience} evaluation(s)"


def from_rows(spec, losses) -> EarlyStopping | None:
    """The stopper of a run (None without `train.early_stopping`), its history from the val rows
    already written (a resumed run's, cut back to its checkpoint)."""
    if spec is None:
        return None
    metric = metric_of(spec.metric)
    stopper = EarlyStopping(metric, spec.patience, spec.min_delta)
    rows = losses[(losses["split"] == "val") & (losses["metric"] == metric)].sort_values("step")
    for model, group in rows.groupby("model", sort=False):
        stopper.history[model] = group["value"].astype(float).tolist()
    return stopper
