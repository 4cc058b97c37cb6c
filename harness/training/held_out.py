"""The held-out test split, scored once at the end of a run with the weights chosen on
validation: nothing that chooses (best weights, early stopping, a race's cuts, a grid's winner)
ever sees it, so its scores are free of the winner's curse that validation scores carry.

Which weights (`output.select_by`): `best_val_loss` (default) loads each member's
models/<name>/best.keras, its state at its best validation score (by the early-stopping metric
when that is on); `final` takes the weights at the end. Without exports (`output.export: false`)
there is no best state on disk, and the final weights are scored (run.json `test` says so).
Every member's weights are put back afterwards: the exported and in-memory models are unchanged.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from harness.core.backend import import_tf
from harness.core.evaluation import make_eval_fn
from harness.core.keras_files import load_keras_weights
from harness.errors import ConfigError
from harness.members.base import preserved_state
from harness.outputs.writers import ValScoresWriter
from harness.rundir import RunDir
from harness.training.output_spread import member_output_spread

tf = import_tf()


class TestScoring(NamedTuple):
    """What scoring the test split gives, all of it with the weights it scored: run.json's `test`
    record, the predictions of the pictured images and each member's output spread; and the
    output spread of the last weights of each member scored on others (a network that collapsed
    after its chosen state: its exported final model is what collapsed)."""

    record: dict[str, Any]
    predicted: dict[str, Any]
    spreads: dict[str, float | None]
    last_spreads: dict[str, float | None]


def score_test_split(members: list, test_dataset, config, run_path: Path, last_steps: dict[str, int], epoch_of, evaluate=None,
                     pictured: tuple[Any, list] | None = None, spread_images: tuple[Any, Any] | None = None) -> TestScoring:
    """Write test_scores.csv (per member and test image, like val_scores.csv; `step` is the step
    whose weights were scored) and return what run.json records under `test`, with what else is
    made while those weights are loaded: the predictions of `pictured` = (images, members) (for
    samples.png: loading them again took 11 s of backbones.yaml's end) and each member's output
    spread on `spread_images` = (images, masks) (a network stuck at its end whose chosen weights
    were not is not what the ranking scored), and of the last weights of those scored on others,
    measured before the chosen ones are loaded (one forward pass of those images each).
    `last_steps`: each member's last trained step, whose weights it holds (the run's last, or the
    step it stopped, diverged or was dropped at).
    `evaluate`: an eval function over exactly `members` to reuse (it reads their weights when
    called)."""
    path = RunDir(run_path).test_scores_csv
    path.unlink(missing_ok=True)  # scored once per completed run: a rerun of the end replaces it
    selected = {m.name: _selected(m.name, config, run_path, last_steps[m.name]) for m in members}
    last_spreads: dict[str, float | None] = {}
    with contextlib.ExitStack() as stack:
        for member in members:
            stack.enter_context(preserved_state(member))
            if selected[member.name]["weights"] == "best" and selected[member.name]["step"] != last_steps[member.name]:
                if spread_images:
                    last_spreads[member.name] = member_output_spread(member, *spread_images)
                _load_best(member, run_path)  # best at its last step: those are the weights in memory
        evaluate = evaluate or make_eval_fn(members, config.data.classes)
        per_image = tf.nest.map_structure(lambda t: t.numpy(), evaluate(test_dataset))
        images, shown = pictured or (None, [])
        predicted = {m.name: np.asarray(m.predict(images)) for m in shown}
        spreads = {m.name: member_output_spread(m, *spread_images) for m in members} if spread_images else {}
    writer = ValScoresWriter(path, config.data.classes, config.losses_differ())
    try:
        for member in members:
            mine = per_image[member.name]
            step = selected[member.name]["step"]
            writer.write(step, epoch_of(step), member.name, mine, member.eval_scores(mine, 1))
    finally:
        writer.close()
    record = {"select_by": config.output.select_by, "images": config.data.test_size, "members": selected}
    return TestScoring(record, predicted, spreads, last_spreads)


def _selected(name: str, config, run_path: Path, last_step: int) -> dict[str, Any]:
    """Which weights of the member are scored, and the step they are from ("final": those of its
    last step, which for a member that stopped early is not the run's last)."""
    if config.output.select_by == "final":
        return {"weights": "final", "step": last_step}
    record = _best_record(run_path, name)
    if record is None:
        why = "output.export is off: no best state on disk" if not config.output.export else "no best.keras on disk: no finite validation score, or the file was removed"
        return {"weights": "final", "step": last_step, "note": why}
    return {"weights": "best", "step": int(record["step"])}


def _best_record(run_path: Path, name: str) -> dict | None:
    """best.json's record of the member's chosen weights in best.keras beside it; None where there
    is no best state (exports off, no finite score, or the files removed). A damaged best.json is
    named like a damaged best.keras: without it the step of the chosen weights is unknown."""
    folder = run_path / "models" / name
    meta = folder / "best.json"
    if not (folder / "best.keras").is_file() or not meta.is_file():
        return None
    try:
        record = json.loads(meta.read_text(encoding="utf-8"))
        int(record["step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _damaged(meta, exc, name, run_path) from None
    return record


def _load_best(member, run_path: Path) -> None:
    """Only the weights, into the member's own model (best.keras was saved from it): rebuilding
    the model from the file took 3-4 s per resnet18 network."""
    path = run_path / "models" / member.name / "best.keras"
    try:
        load_keras_weights(member.model, path)
    except Exception as exc:  # noqa: BLE001 (a cut or overwritten file: zipfile, h5py and Keras each raise their own)
        raise _damaged(path, exc, member.name, run_path) from None


def _damaged(path: Path, exc: Exception, name: str, run_path: Path) -> ConfigError:
    """A file of the chosen weights that cannot be read: named (exit 2) with the two ways on, not
    replaced by other weights, which would rank the member on weights nothing chose while the
    verdict says they were chosen."""
    said = str(exc).splitlines()[0][:200] if str(exc) else "no detail"
    return ConfigError(
        f"{path} cannot be read ({type(exc).__name__}: {said}). best.keras and best.json in {path.parent} hold {name}'s "
        f"weights chosen on validation and their step, which the test split scores: put back good copies and run "
        f"`harness resume {run_path}`, or remove both and resume: {name}'s final weights are scored instead, and run.json's "
        "`test` says so. The training and its checkpoints are intact."
    )
