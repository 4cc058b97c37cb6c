"""One evaluation of the members still scored: rows for losses.csv, per-image rows for
val_scores.csv, and the outcome the eval actions decide on."""

from __future__ import annotations

from harness.config.metrics import is_per_class
from harness.core.backend import import_tf
from harness.outputs.writers import Row, ValScoresWriter
from harness.training.eval_actions import Evaluation


def validate(compiled, roster, val_dataset, val_scores: ValScoresWriter, step: int, epoch: int) -> tuple[list[Row], Evaluation]:
    """Scores over the validation set and per image, from what each image contributed: one
    evaluation, one host sync. Members that left (diverged, stopped, dropped) are not scored."""
    tf = import_tf()
    per_image = tf.nest.map_structure(lambda t: t.numpy(), compiled.evaluate(val_dataset))
    rows, scores = [], {}
    for member in compiled.active:
        if not roster.is_ok(member.name):
            continue
        mine = per_image[member.name]
        metrics = member.eval_scores({k: v.sum(axis=0) for k, v in mine.items()}, len(mine["loss"]))
        rows += [Row(step, epoch, member.name, "val", m, float(v)) for m, v in metrics.items() if not is_per_class(m)]  # per class: val_scores.csv
        val_scores.write(step, epoch, member.name, mine, member.eval_scores(mine, 1))
        scores[member.name] = {m: float(v) for m, v in metrics.items()}
    return rows, Evaluation(step, scores)
