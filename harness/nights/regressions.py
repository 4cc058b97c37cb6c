"""Did a metric get worse? Pure functions of two runs' measurements and the thresholds.

A change is a regression when the metric moved in its bad direction by more than its threshold
(strictly more: a change exactly at the threshold is allowed), when a value that was finite is
now missing or not finite, when a model that trained fine before diverged, or when one whose every
seed learned before has a seed stuck now (its output nearly the same for every image).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Mapping

from harness.config.nightly_spec import ThresholdSpec
from harness.config import metrics
from harness.outputs import columns
from harness.outputs.stuck import STUCK_BELOW, STUCK_SEEDS
from harness.outputs.tables import failed
_ROUNDING = 1e-9


def higher_is_better(metric: str, threshold: ThresholdSpec | None = None) -> bool:
    if threshold is not None and threshold.higher_is_better is not None:
        return threshold.higher_is_better
    return metrics.higher_is_better(metric)


@dataclass(frozen=True)
class Paired:
    """A watched metric's change, tonight minus the earlier run, for one model, with its 95%
    interval from the two runs paired on the same images (`harness compare --pairs`)."""

    diff: float
    low: float
    high: float
    covers: str


@dataclass(frozen=True)
class Change:
    """One watched metric of one model, tonight against an earlier run."""

    against: str  # "previous" or "baseline"
    against_run: str
    model: str
    metric: str
    before: float
    now: float
    worse_by: float  # in the metric's bad direction; negative means it improved
    allowed: str  # the threshold, as written: "abs 0.02", "rel 10%"
    regressed: bool
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line for the terminal: "unet val_iou vs previous RUN: 0.1709 -> missing (allowed:
        abs 0.02) now missing or not finite"; a status change has no values, only its note
        ("ok -> diverged")."""
        head = f"{self.model} {self.metric} vs {self.against} {self.against_run}:"
        if self.metric == "status":
            return f"{head} {self.note} ({self.allowed})"
        return f"{head} {_shown(self.before)} -> {_shown(self.now)} (allowed: {self.allowed}) {self.note}".rstrip()


def _shown(value: float) -> str:
    return f"{value:.4g}" if columns.is_finite(value) else "missing"


def compare(
    now: Mapping[tuple[str, str], float],
    before: Mapping[tuple[str, str], float],
    now_status: Mapping[str, str],
    before_status: Mapping[str, str],
    thresholds: Mapping[str, ThresholdSpec],
    against: str,
    against_run: str,
    resampled: bool = False,
    paired: Mapping[tuple[str, str], Paired] | None = None,
    other_machine: str | None = None,
) -> list[Change]:
    """Every watched (model, metric) present in both runs, plus every model that stopped training
    fine. Models only in one of the two runs are reported as a note, not a regression.
    `resampled`: tonight's seeds each trained on a bootstrap of the training set (said in notes).
    `paired`: (model, metric) -> the change's interval from both runs on the same images, which a
    `beyond_noise` threshold judges by where it can (else by tonight's interval alone).
    `other_machine`: the earlier run ran on other hardware (said how): a timed cost (ms_per_step,
    latency_ms, ...) is shown but not judged, as its change would measure the machines."""
    changes: list[Change] = []
    models = sorted(set(now_status) | {m for m, _ in now})
    for model in models:
        if model not in before_status and not any(m == model for m, _ in before):
            continue
        # Failing is a regression; stopping early or leaving a race is how the run was set to end.
        if model in before_status and not failed(before_status[model]) and failed(now_status.get(model, "ok")):
            changes.append(
                Change(against, against_run, model, "status", math.nan, math.nan, math.nan, "must not diverge or run out of memory", True,
                       f"{before_status[model]} -> {now_status[model]}")
            )
        if stuck := _newly_stuck(against, against_run, model, now, before):
            changes.append(stuck)
        for metric, threshold in sorted(thresholds.items()):
            if (model, metric) not in before:
                continue
            interval = (now.get((model, f"{metric}_low"), math.nan), now.get((model, f"{metric}_high"), math.nan))
            covers = noise_covered(metric, now.get((model, "repeats"), 1), resampled)
            pair = (paired or {}).get((model, metric)) if threshold.beyond_noise else None
            change = _change(against, against_run, model, metric, before[(model, metric)], now.get((model, metric), math.nan), threshold, interval, covers,
                             noise_by_tonight=pair is None)
            change = change if pair is None else _judged_paired(change, pair, threshold)
            if other_machine and metrics.is_timed(metric):
                change = replace(change, regressed=False, note=f"not judged: {other_machine}")
            changes.append(change)
    return changes


def _newly_stuck(against: str, run: str, model: str, now: Mapping[tuple[str, str], float], before: Mapping[tuple[str, str], float]) -> Change | None:
    """A model every measured seed of which learned in the earlier run and one of which is stuck
    tonight (outputs/stuck.py), as a regression; None otherwise, and where either run did not
    measure it (a run before harness 0.3.7; a kind whose prediction is not one array)."""
    then, tonight = before.get((model, STUCK_SEEDS)), now.get((model, STUCK_SEEDS))
    if then != 0 or not columns.is_finite(tonight) or not tonight > 0:
        return None
    spreads = f"{_shown(before.get((model, 'output_spread'), math.nan))} -> {_shown(now.get((model, 'output_spread'), math.nan))}"
    return Change(against, run, model, STUCK_SEEDS, then, tonight, tonight - then, "no stuck seed", True,
                  f"stuck now, learning then: output_spread {spreads} (the seeds' mean; under {STUCK_BELOW} a seed's output is "
                  "nearly the same for every image); summary.csv's stuck_seeds names the seeds")


def noise_covered(metric: str, repeats: float, resampled: bool = False) -> str:
    """What tonight's interval of `metric` covers, in the verdict's words: the images of its own
    split, and with repeats training randomness (the training-set bootstraps too, when drawn)."""
    images = "test-image" if metrics.split_column(metric)[0] == "test" else "validation-image"
    if repeats > 1:
        return f"training randomness{' (training-set bootstraps included)' if resampled else ''} and {images} noise (repeats)"
    return f"{images} noise only (one training seed: training randomness not measured)"


NOISE_OF_IMAGES = noise_covered("val_iou", 1)


def _change(against: str, run: str, model: str, metric: str, before: float, now: float, threshold: ThresholdSpec, interval=(math.nan, math.nan), covers: str = NOISE_OF_IMAGES,
            noise_by_tonight: bool = True) -> Change:
    """The change against its threshold; with `beyond_noise` (and `noise_by_tonight`: no paired
    interval to judge by instead), a drop the earlier value lies within tonight's interval of is noise."""
    sign = -1.0 if higher_is_better(metric, threshold) else 1.0
    allowed = f"abs {threshold.abs:g}" if threshold.abs is not None else f"rel {threshold.rel:.0%}"
    if not columns.is_finite(before):
        return Change(against, run, model, metric, before, now, math.nan, allowed, False, "no earlier value")
    if not columns.is_finite(now):
        return Change(against, run, model, metric, before, now, math.inf, allowed, True, "now missing or not finite")
    worse_by = sign * (now - before)
    limit = threshold.abs if threshold.abs is not None else threshold.rel * abs(before)
    # A change of exactly the threshold is allowed, also when decimal values round (0.5 - 0.48).
    regressed = worse_by > limit + _ROUNDING * max(abs(before), abs(now), limit)
    note = ""
    if threshold.beyond_noise and noise_by_tonight:
        low, high = interval
        if not (columns.is_finite(low) and columns.is_finite(high)):
            note = "no interval tonight: judged by the threshold alone"
        elif regressed and low <= before <= high:
            regressed, note = False, f"within tonight's 95% interval [{low:.4g}, {high:.4g}] of {covers}: noise"
        elif regressed:
            note = f"beyond tonight's 95% interval [{low:.4g}, {high:.4g}] of {covers}"
    elif regressed and not threshold.beyond_noise and interval[0] <= before <= interval[1]:  # NaN bounds: no note
        # Still a regression, as the threshold alone decides; but the reader is told it may be noise.
        note = f"within tonight's 95% interval [{interval[0]:.4g}, {interval[1]:.4g}] of {covers}: it may be noise (beyond_noise: true judges that)"
    return Change(against, run, model, metric, before, now, worse_by, allowed, regressed, note)


def _judged_paired(change: Change, pair: Paired, threshold: ThresholdSpec) -> Change:
    """A change beyond its threshold is a regression only if the paired interval of tonight minus
    the earlier run lies wholly on the bad side of 0: the two runs' noise on the same images is
    weighed together, not tonight's alone against an earlier value taken as exact."""
    if not change.regressed or not (columns.is_finite(pair.low) and columns.is_finite(pair.high)):
        return change
    worse = pair.high < 0 if higher_is_better(change.metric, threshold) else pair.low > 0
    said = f"paired with {change.against_run} on the same images: tonight - then {pair.diff:+.4g} [{pair.low:+.4g}, {pair.high:+.4g}] of {pair.covers}"
    return replace(change, regressed=worse, note=said + ("" if worse else ": noise"))


def models_added_or_removed(now_status: Mapping[str, str], before_status: Mapping[str, str]) -> list[str]:
    notes = [f"new model {m!r} (nothing earlier to compare with)" for m in sorted(set(now_status) - set(before_status))]
    notes += [f"model {m!r} is no longer in the experiment" for m in sorted(set(before_status) - set(now_status))]
    return notes


def metrics_added(now: Mapping[tuple[str, str], float], before: Mapping[tuple[str, str], float], thresholds: Mapping[str, ThresholdSpec]) -> list[str]:
    """A watched metric tonight has and the earlier run had for no model (`test_iou` once a test
    split is added): nothing to compare it with, said rather than passed over."""
    had = {metric for _, metric in before}
    new = sorted({metric for _, metric in now if metric in thresholds} - had)
    return [f"{metric} is new (that run has no such column): nothing earlier to compare it with" for metric in new]
