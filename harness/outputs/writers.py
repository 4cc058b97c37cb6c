"""Where measurements go as the run proceeds: one interface, several writers.

A measurement is a tidy row (step, epoch, model, split, metric, value). The runner hands each batch
of rows to a `MultiWriter`; each writer decides what to do with them (append to losses.csv, show
progress in the terminal, ...).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence
from harness.config.metrics import per_class
from harness.rundir import atomic_write_text

COLUMNS = ("step", "epoch", "model", "split", "metric", "value")


@dataclass(frozen=True)
class Row:
    step: int
    epoch: int
    model: str
    split: str
    metric: str
    value: float


class Writer(Protocol):
    def write(self, rows: Sequence[Row], step: int) -> None: ...

    def close(self) -> None: ...


class MultiWriter:
    def __init__(self, writers: Sequence[Writer]):
        self.writers = list(writers)

    def write(self, rows: Sequence[Row], step: int) -> None:
        for writer in self.writers:
            writer.write(rows, step)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class CsvRowsWriter:
    """Appends rows to losses.csv and flushes at every write, so a crash keeps what was measured."""

    def __init__(self, path: Path):
        new = not path.exists() or path.stat().st_size == 0
        self._handle = path.open("a", newline="", encoding="utf-8")
        self._csv = csv.writer(self._handle, lineterminator="\n")
        if new:
            self._csv.writerow(COLUMNS)
            self._handle.flush()

    def write(self, rows: Sequence[Row], step: int) -> None:
        self._csv.writerows(
            (r.step, r.epoch, r.model, r.split, r.metric, _format(r.value)) for r in rows
        )
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def _format(value: float) -> str:
    # repr keeps every bit of a float32 loss; the table must hold exactly what was computed.
    return repr(float(value)) if math.isfinite(value) else str(float(value))


class TensorBoardWriter:
    """tb/<model>/ event files, one folder per member so TensorBoard overlays them, with the
    model's hyperparameters (hparams plugin) so runs can be filtered and compared there too.

    Scalars are named `<split>/<metric>` (train/loss, val/iou); the model is the folder.
    """

    def __init__(self, folder: Path, hparams: dict[str, dict]):
        from harness.core.backend import import_tf

        self.tf = import_tf()
        # tf.summary.scalar builds the same plugin metadata (a protobuf) at every call, about half
        # its time (smoke's 340 rows: 0.31-0.43 s -> 0.16-0.19 s). Made once, the events are the
        # same (tags, steps, values, plugin: tested).
        from tensorboard.plugins.scalar import metadata

        self.scalar = metadata.create_summary_metadata(display_name=None, description=None)
        self.writers = {}
        for name, params in hparams.items():
            writer = self.tf.summary.create_file_writer(str(folder / name))
            self.writers[name] = writer
            try:
                from tensorboard.plugins.hparams import api as hp

                with writer.as_default():
                    hp.hparams(params, trial_id=name)
            except ImportError:  # hparams need the tensorboard package; scalars do not
                pass

    def write(self, rows: Sequence[Row], step: int) -> None:
        for name, writer in self.writers.items():
            mine = [r for r in rows if r.model == name]
            if not mine:
                continue
            with writer.as_default():
                for r in mine:
                    self.tf.summary.write(f"{r.split}/{r.metric}", self.tf.constant(r.value, self.tf.float32), step=r.step, metadata=self.scalar)
            writer.flush()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def truncate_rows_after(path: Path, step: int) -> int:
    """Drop rows measured after `step` (work a resume will redo), keeping every other byte as it was.
    Returns how many rows were dropped. This is what makes each (model, split, metric, step)
    appear exactly once however many times a run is resumed."""
    if not path.exists():
        return 0
    with path.open(encoding="utf-8", newline="") as handle:
        lines = handle.read().splitlines(keepends=True)
    header, body = lines[:1], lines[1:]
    kept = [line for line in body if _row_step(line) is not None and _row_step(line) <= step]
    if len(kept) != len(body):
        atomic_write_text(path, "".join(header + kept))
    return len(body) - len(kept)


def _row_step(line: str) -> int | None:
    # A line cut short by a kill mid-write has no newline, or no value: it is dropped too.
    if not line.endswith("\n") or line.count(",") < len(COLUMNS) - 1:
        return None
    try:
        return int(line.split(",", 1)[0])
    except ValueError:
        return None


VAL_SCORE_BASE = ("step", "epoch", "model", "image")
COUNTS = ("intersection", "predicted", "truth")


def val_score_columns(classes: int, compare_loss: bool = False) -> list[str]:
    """val_scores.csv: per evaluation, member and validation image, its scores and the counts they
    come from (background excluded); multi-class tasks add each class's scores and counts. With
    members on different losses, `compare_loss` last (empty for members not scored on it)."""
    common = ["compare_loss"] if compare_loss else []
    if classes == 1:
        return [*VAL_SCORE_BASE, "loss", "iou", "f1", *COUNTS, *common]
    classes_columns = [per_class(name, c) for name in ("iou", "f1", *COUNTS) for c in range(1, classes)]
    return [*VAL_SCORE_BASE, "loss", "iou", "f1", *classes_columns, *common]


def counts_of(frame, classes: int) -> dict:
    """Per-image quantities [N, C'] (and loss [N]) back from val_scores.csv rows."""
    import numpy as np

    if classes == 1:
        counts = {k: frame[[k]].to_numpy(np.float64) for k in COUNTS}
    else:
        counts = {k: frame[[per_class(k, c) for c in range(1, classes)]].to_numpy(np.float64) for k in COUNTS}
    return {"loss": frame["loss"].to_numpy(np.float64), **counts}


class ValScoresWriter:
    """Appends each evaluation's per-image rows to val_scores.csv, flushed at every write."""

    def __init__(self, path: Path, classes: int, compare_loss: bool = False):
        self.classes = classes
        new = not path.exists() or path.stat().st_size == 0
        # A resumed run goes on with the columns its file has (one from before compare_loss too).
        self.columns = val_score_columns(classes, compare_loss) if new else _header(path)
        self._handle = path.open("a", newline="", encoding="utf-8")
        self._csv = csv.writer(self._handle, lineterminator="\n")
        if new:
            self._csv.writerow(self.columns)
            self._handle.flush()

    def write(self, step: int, epoch: int, model: str, per_image: dict, scores: dict) -> None:
        values = dict(scores)
        for key in COUNTS:
            if key in per_image:
                if self.classes == 1:
                    values[key] = per_image[key][:, 0]
                else:
                    values.update({per_class(key, c): per_image[key][:, c - 1] for c in range(1, self.classes)})
        count = len(per_image["loss"])
        for i in range(count):
            row = [step, epoch, model, i]
            row += [_format(float(values[c][i])) if c in values else "" for c in self.columns[len(VAL_SCORE_BASE):]]
            self._csv.writerow(row)
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def _header(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as handle:
        return next(csv.reader(handle))
