"""The metric vocabulary, in one place: what each score and cost is called, which way is better,
how it is labelled and written, and how column names are made from a metric and a split.

A summary column is `<prefix><metric>`: `val_iou` (the last evaluation on validation images),
`test_iou` (the held-out test split, scored once with the chosen weights), `selected_val_iou` (the
validation score of those chosen weights). Per-class scores are `<metric>_c<class>` (`iou_c2`).
Everything that ranks, highlights, stops early, races or watches a metric at night asks here, so
a new metric needs one line, and a member kind's own metrics (a GAN's `adv`, a user's `coverage`)
get a direction from the kind (`Member.higher_is_better`), not from a missing list entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

VAL, TEST, SELECTED_VAL = "val_", "test_", "selected_val_"
SPLIT_PREFIXES = (SELECTED_VAL, TEST, VAL)  # longest first: selected_val_ also starts like val_
SPLIT_WORDS = {"val": "validation", "test": "test"}  # a scored split's images, in a sentence


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    label: str
    format: str  # a format spec for one value: ".4f", ".1f", ".2f"; "count" for 15.0 k / 8.8 M
    bounds: tuple[float, float] | None = None  # the values it can take, where the metric itself fixes them
    timed: bool = False  # measured on the run's machine (times, throughput, memory): compared across machines it measures them
    # A best among models means something: not for output_spread, where above 0.01 more is not better (0.4 against 0.8).
    has_best: bool = True


# Scores measured on images: each is a validation column, a test column and a per-image score.
SCORES = {
    "iou": Metric("iou", True, "IoU", ".4f", (0.0, 1.0)),
    "f1": Metric("f1", True, "F1", ".4f", (0.0, 1.0)),
    "loss": Metric("loss", False, "loss", ".4f"),
    "compare_loss": Metric("compare_loss", False, "common loss", ".4f"),
}
# What a member costs or how its training went: summary columns without a split.
COSTS = {
    "params": Metric("params", False, "params", "count"),
    "flops_per_example": Metric("flops_per_example", False, "FLOPs", "count"),
    "ms_per_step": Metric("ms_per_step", False, "ms/step", ".1f", timed=True),
    "images_per_s": Metric("images_per_s", True, "images/s", ".1f", timed=True),
    "input_wait_share": Metric("input_wait_share", False, "input wait", ".2f", timed=True),
    "latency_ms": Metric("latency_ms", False, "latency ms", ".2f", timed=True),
    "latency_p90_ms": Metric("latency_p90_ms", False, "latency p90 ms", ".2f", timed=True),
    "serve_images_per_s": Metric("serve_images_per_s", True, "serve img/s", ".1f", timed=True),
    "serve_peak_mb": Metric("serve_peak_mb", False, "serve peak MB", ".1f", timed=True),
    "model_mb": Metric("model_mb", False, "file MB", ".2f"),
    "best_val_loss": Metric("best_val_loss", False, "best val loss", ".4f"),
    "final_train_loss": Metric("final_train_loss", False, "train loss", ".4f"),
    # How much the output varies from image to image, as a share of the targets' (near 0: stuck).
    "output_spread": Metric("output_spread", True, "output spread", ".3g", has_best=False),
}

# What early stopping and a race may watch (validation scores), and what a run may be ranked by.
WATCHABLE = tuple(VAL + name for name in ("iou", "f1", "loss"))
RANK_METRICS = (*WATCHABLE, VAL + "compare_loss", "best_val_loss", "final_train_loss")
# Rankings that compare members' own losses: meaningless across members trained on different ones.
OWN_LOSS_RANKINGS = (VAL + "loss", TEST + "loss", "best_val_loss", "final_train_loss")
# Every column of a member's own loss: no best among members that trained on different ones.
OWN_LOSS_COLUMNS = (*OWN_LOSS_RANKINGS, SELECTED_VAL + "loss")

_PER_CLASS = re.compile(r"^(?P<metric>.+)_c(?P<cls>\d+)$")


def column(metric: str, split: str = "val") -> str:
    """`column("iou", "test")` -> "test_iou"; split is val, test or selected_val."""
    return {"val": VAL, "test": TEST, "selected_val": SELECTED_VAL}[split] + metric


def split_column(name: str) -> tuple[str | None, str]:
    """("test", "iou") for "test_iou"; (None, name) for a column without a split prefix."""
    for prefix in SPLIT_PREFIXES:
        if name.startswith(prefix):
            return prefix[:-1], name.removeprefix(prefix)
    return None, name


def metric_of(name: str) -> str:
    """The metric a column holds: "iou" for val_iou, test_iou and selected_val_iou."""
    return split_column(name)[1]


def on_split(name: str, split: str) -> str:
    """The same metric on another split: on_split("val_iou", "test") -> "test_iou"."""
    return column(metric_of(name), split)


def per_class(metric: str, cls: int) -> str:
    return f"{metric}_c{cls}"


def is_per_class(name: str) -> bool:
    return _PER_CLASS.match(name) is not None


def describe(name: str) -> Metric | None:
    """The vocabulary's entry for a column (a score on any split and of any class, or a cost),
    None if unknown."""
    if name in COSTS:
        return COSTS[name]
    return SCORES.get(_base_metric(metric_of(name)))


def _base_metric(metric: str) -> str:
    """"iou" for "iou_c2": a class's score is read as its metric is."""
    match = _PER_CLASS.match(metric)
    return match["metric"] if match and match["metric"] in SCORES else metric


def bounds(name: str) -> tuple[float, float] | None:
    """The range a column's values can take: IoU and F1 (any split, any class) lie in [0, 1].
    None for losses (a member kind's own loss may go below 0) and for anything unknown."""
    known = describe(name)
    return known.bounds if known and name not in COSTS else None


def is_timed(name: str) -> bool:
    """A cost measured on the machine the run ran on (ms_per_step, latency_ms, ...), not a
    property of the model (params, FLOPs, file size) or a score."""
    return name in COSTS and COSTS[name].timed


def difference_bounds(name: str) -> tuple[float, float] | None:
    """The range of one model's value minus another's: [-1, 1] for IoU and F1."""
    if (range_ := bounds(name)) is None:
        return None
    return range_[0] - range_[1], range_[1] - range_[0]


# Metrics member kinds declared higher-is-better (Member.higher_is_better), in this process: the
# run declares its members' when it builds them, and `harness report` those its run.json records.
_DECLARED_HIGHER: set[str] = set()


def declare_higher_is_better(names: Iterable[str]) -> None:
    _DECLARED_HIGHER.update(names)


def higher_is_better(name: str, declared: Iterable[str] = ()) -> bool:
    """True for scores and throughput; False for losses, sizes and times. A metric the vocabulary
    does not know goes up only if a member kind declared it so: in this process, or in `declared`
    (a finished run's, read from its run.json without declaring it for every run a command reads)."""
    known = describe(name)
    if known is not None:
        return known.higher_is_better
    return metric_of(name) in {*_DECLARED_HIGHER, *declared}


def has_direction(name: str) -> bool:
    """Whether one model's value of the column can be called the best of several."""
    known = describe(name)
    return known.has_best if known is not None else metric_of(name) in _DECLARED_HIGHER


def label(name: str) -> str:
    """How a column is headed for people: "test IoU", "val loss", "ms/step"."""
    if name in COSTS:
        return COSTS[name].label
    split, metric = split_column(name)
    known = SCORES.get(_base_metric(metric))
    text = (known.label + metric.removeprefix(_base_metric(metric)).replace("_c", " class ")) if known else metric
    return f"{split.replace('_', ' ')} {text}" if split else text


def value_format(name: str) -> str | None:
    known = describe(name)
    return known.format if known else None
