"""Live progress on the terminal, as one line that fits any width, and plain lines in logs.

The line always shows the step, the total and the elapsed time; from the second call on, the time
left, at the pace of the calls after the first (the first call traces the fused step: minutes for a
dozen sm networks where a step takes seconds, so counting it would overstate what is left several
times over); then a bar if there is room; then as many members' latest training losses as fit, the
rest counted ("+3 more").
Members that left the run (dropped by a race, stopped early) are left out: their rows stop coming.
Validation scores are printed above the line at each evaluation, wrapped to the width, on a
terminal as in a log.
With `train.repeats`, each model's seeds are one entry (`unet@1-20`): the mean of their losses and
scores, and the seeds' range of the first score, where 20 entries per model made a validation
1,500 characters long.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from typing import Sequence, TextIO

from harness.config.naming import model_of, repeats_span, seeds_of_each_model

MIN_BAR = 10  # a bar narrower than this says nothing: leave it out
SHOWN_VAL = ("iou", "loss")


def clock(seconds: float) -> str:
    seconds = int(round(max(seconds, 0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def status_line(step: int, total: int, elapsed: float, left: float | None, losses: dict[str, str], width: int, bar: bool = True, label: str = "") -> str:
    """One line of at most `width` characters. The head (step/total, elapsed, time left once known) always;
    a bar, if at least MIN_BAR wide remains with a third of the rest for losses; losses as fit."""
    head = f"step {step}/{total}  {clock(elapsed)}  ~{clock(left)} left" if left is not None else f"step {step}/{total}  {clock(elapsed)}"
    room = width - len(head)
    first = next(iter(losses.items()), None)  # at least one member's loss before any bar
    needed = len(f"  {label}{first[0]} {first[1]}  +{len(losses)} more") if first else 0
    bar_width = min(30, room - 2 - needed) if bar else 0
    if bar_width >= MIN_BAR:
        filled = round(bar_width * step / max(total, 1))
        head = f"{head}  {'█' * filled}{'░' * (bar_width - filled)}"
    return (head + _fitted(losses, width - len(head) - 2 - len(label), prefix=f"  {label}"))[:width]


def _fitted(values: dict[str, str], room: int, prefix: str = "") -> str:
    """`name value` pairs as many as fit in `room` characters, then `+N more`."""
    shown: list[str] = []
    for i, (name, value) in enumerate(values.items()):
        item = f"{name} {value}"
        rest = len(values) - i - 1
        more = f"  +{rest} more" if rest else ""
        if len("  ".join(shown + [item])) + len(more) > room:
            more = f"+{len(values) - i} more"
            return prefix + "  ".join(shown + [more]) if len("  ".join(shown + [more])) <= room else prefix + "  ".join(shown)
        shown.append(item)
    return prefix + "  ".join(shown) if shown else ""


def seeds_pooled(values: dict[str, float]) -> dict[str, list[float]]:
    """Each model's members under one label, in the order given: `unet@1`..`unet@20` ->
    `unet@1-20` with their 20 values; a model of one member keeps its name and its one value."""
    return {repeats_span(members): [values[m] for m in members] for members in seeds_of_each_model(values).values()}


def pooled_scores(scores: dict[str, dict[str, float]]) -> dict[str, dict[str, str]]:
    """Validation scores per model, in the order given: each metric's mean over its seeds, and,
    with seeds, their range for the first metric shown (how far one seed's score is from
    another's). A seed's score that is not finite (it diverged) is counted apart, not averaged:
    one NaN would have made its model's mean and range NaN."""
    shown: dict[str, dict[str, str]] = {}
    for members in seeds_of_each_model(scores).values():
        entry = shown[repeats_span(members)] = {}
        for metric in SHOWN_VAL:
            values = [scores[m][metric] for m in members if metric in scores[m]]
            if not values:
                continue
            finite = [v for v in values if math.isfinite(v)]
            notes = [f"seeds {_score(min(finite))}-{_score(max(finite))}"] if len(finite) > 1 and not entry else []
            notes += [f"{len(values) - len(finite)} of {len(values)} not finite"] if len(values) > len(finite) and len(values) > 1 else []
            entry[metric] = (_score(sum(finite) / len(finite)) if finite else "nan") + (f" ({'; '.join(notes)})" if notes else "")
    return shown


def mean_of_finite(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _score(value: float) -> str:
    """Three decimals, or three significant digits below 0.1: with three decimals alone an
    autoencoder's MSE of 0.0120 and 0.0094 read 0.012 and 0.009, its seeds' range 0.012-0.012."""
    return f"{value:.3f}" if abs(value) >= 0.1 or value == 0 else f"{value:#.3g}"


def val_lines(step: int, scores: dict[str, dict[str, str]], width: int, pooled: bool = False) -> list[str]:
    """`val @ step S: a iou 0.61 loss 0.43 | b ...`, wrapped at members to `width`; `pooled`: the
    entries are models' means over their seeds, and the head says so."""
    items = [f"{m} " + " ".join(f"{k} {v[k]}" for k in SHOWN_VAL if k in v) for m, v in scores.items()]
    lines, line = [], f"val @ step {step}, each model's mean over its seeds:" if pooled else f"val @ step {step}:"
    for item in items:
        if len(line) + 3 + len(item) > width and not line.endswith(":"):
            lines.append(line)
            line = "   "
        line = f"{line} {item}" if line.endswith(":") or line == "   " else f"{line} | {item}"
    return lines + [line]


class TerminalWriter:
    """Progress with each model's latest train loss and each evaluation's scores. mode `bar`:
    one line redrawn in place (a terminal); `lines`: a line per call (logs); `none`: silent."""

    def __init__(self, total_steps: int, models: Sequence[str], mode: str = "auto", start_step: int = 0, stream: TextIO | None = None, width: int | None = None):
        self.stream = stream or sys.stderr
        self.total, self.models, self.start_step = total_steps, list(models), start_step
        self.mode = ("bar" if self.stream.isatty() else "lines") if mode == "auto" else mode
        self.fixed_width = width
        self._seeds = any(model_of(m) != m for m in self.models)  # train.repeats: a model's seeds as one entry
        self.latest: dict[str, str] = {}
        self._started = time.monotonic()
        self._paced_from: tuple[float, int] | None = None  # (time, step) when the first call returned
        self._drawn = False

    @property
    def width(self) -> int:
        """The terminal's width, read at every write (a resized window); a log line is not cut."""
        if self.fixed_width:
            return self.fixed_width
        return shutil.get_terminal_size((100, 24)).columns if self.mode == "bar" else 100_000

    def write(self, rows: Sequence, step: int) -> None:
        if self.mode == "none":
            return
        current = {r.model: r.value for r in rows if r.split == "train" and r.metric == "loss"}
        if current:  # members with no row at this call have left the run: not shown
            pooled = seeds_pooled({m: current[m] for m in self.models if m in current})
            self.latest = {label: f"{mean_of_finite(values):.4f}" for label, values in pooled.items()}
        val: dict[str, dict[str, float]] = {}
        for r in rows:
            if r.split == "val" and r.metric in SHOWN_VAL:
                val.setdefault(r.model, {})[r.metric] = r.value
                val_step = r.step
        now = time.monotonic()
        elapsed = now - self._started
        left = self._time_left(now, step)
        if val:
            self._print_above(val_lines(val_step, pooled_scores(val), self.width, pooled=self._seeds))
        bar = self.mode == "bar"
        label = "" if bar else "mean loss: " if self._seeds else "loss: "
        line = status_line(step, self.total, elapsed, left, self.latest, self.width - bar, bar=bar, label=label)
        if self.mode == "bar":
            self.stream.write("\r" + line.ljust(self.width - 1))
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _time_left(self, now: float, step: int) -> float | None:
        """At the pace since the first call returned; None until a second call has (the first one's
        time is mostly tracing, which no later call pays), and at the last step, where "~0s left"
        would be read as the command's end while the end of the run's own work is still to come."""
        if step >= self.total:
            return None
        if self._paced_from is None:
            if step > self.start_step:
                self._paced_from = (now, step)
            return None
        since, from_step = self._paced_from
        return (now - since) / (step - from_step) * (self.total - step) if step > from_step else None

    def _print_above(self, lines: list[str]) -> None:
        clear = "\r" + " " * (self.width - 1) + "\r" if self._drawn else ""
        self.stream.write(clear + "\n".join(lines) + "\n")

    def say(self, text: str) -> None:
        """A message that must not be drawn over (Ctrl-C acknowledged): on its own line."""
        self.stream.write(("\n" if self._drawn else "") + text + "\n")
        self._drawn = False
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
