"""Each trained model on its own, in the `.keras` format: loadable with plain tf_keras
(`tf_keras.models.load_model(path, compile=False)`), with no harness and no segmentation-models;
and, when asked for, as a TensorFlow SavedModel.

models/<name>/model.keras          the model at the end of the run
models/<name>/best.keras           the model at its best validation loss; best.json says which step
models/<name>/model_saved_model/   with `output.export_formats: [keras, saved_model]`: for serving
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

from harness.config.metrics import column, higher_is_better
from harness.outputs.columns import is_finite
from harness.rundir import atomic_write_text, replaced_whole
from harness.training.portable import portable_model


def export_saved_model(model, folder: Path) -> None:
    """A SavedModel (inference: `tf.saved_model.load(folder).serve(images)`), written to a
    temporary folder beside `folder`, then renamed: a kill never leaves half of one."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with replaced_whole(folder, folder.with_name(f".{folder.name}-partial")) as tmp, _quiet():
        model.export(str(tmp))


def _quiet():
    """tf_keras's export prints the endpoint's signature to stdout: not for our users' terminals."""
    import io

    return contextlib.redirect_stdout(io.StringIO())


def export_model(model, path: Path) -> str | None:
    """Save to a temporary name beside `path`, then rename: a kill never leaves half a model. The
    model is saved in layers plain tf_keras loads safely (`portable_model`); returns None, or a
    note saying how the file must be loaded when that could not be done."""
    model, note = portable_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    # "keras_v3", not "keras": tf_keras reads "keras" through a per-thread flag that its own first
    # save or load in a thread other than the main one leaves off, and every later save in that
    # thread (an API call from a worker thread) then wrote HDF5 under the .keras name.
    with replaced_whole(path, path.with_name(f".{path.stem}-partial.keras")) as tmp, _without_legacy_metadata():
        model.save(str(tmp), save_format="keras_v3")
    return note


# The .keras writer looks for nested state by reading every attribute of every layer; one of them,
# `_tracking_metadata`, builds the legacy SavedModel's JSON description of the layer (a string, never
# state) and was 35-45% of a save: a tiny net's save 50-60 ms -> 29 ms, a resnet18 Unet's 0.57 ->
# 0.37 s (a run saves best.keras at each improvement and model.keras at its end). The files written
# are the same (config.json and weights, compared in the tests).
_LEGACY_METADATA = "_tracking_metadata"


@contextlib.contextmanager
def _without_legacy_metadata():
    """tf_keras's own list of attributes its writer skips (`ATTR_SKIPLIST`, a frozen set read at
    each save), with the legacy metadata on it for this save; put back after. Two saves in two
    threads may leave it on: harmless, since it is never state."""
    from tf_keras.src.saving import saving_lib

    skipped = getattr(saving_lib, "ATTR_SKIPLIST", None)
    if not isinstance(skipped, frozenset) or _LEGACY_METADATA in skipped:
        yield
        return
    saving_lib.ATTR_SKIPLIST = skipped | {_LEGACY_METADATA}
    try:
        yield
    finally:
        saving_lib.ATTR_SKIPLIST = skipped


class BestTracker:
    """Keeps models/<name>/best.keras at the best validation score seen so far: the lowest loss,
    or with early stopping its metric (the member's best state by what stopped it).

    The file is written with the run's next checkpoint (`flush`), not at each improvement: a model
    file per member per improvement was, with short epochs, a write as large as the checkpoint's
    own. At an evaluation the checkpoint follows at once (the default: every epoch end) the live
    weights are written then; otherwise a copy of the improved weights waits in host memory. So
    what is on disk never runs ahead of the newest checkpoint, and a run killed in between redoes
    those evaluations and finds the same improvements again.

    On resume, a best model saved after the restored step belongs to work that is being redone:
    it is forgotten, and the redone validations choose again.
    """

    def __init__(self, folder: Path, names: list[str], restored_step: int, metric: str = "loss"):
        self.folder = folder
        self.metric = metric
        self.column = column(metric)
        self.sign = -1.0 if higher_is_better(self.column) else 1.0  # compare as "lower is better"
        self.best: dict[str, float] = {}
        self.pending: dict[str, _Improved] = {}
        for name in names:
            record = self._record(name)
            if record is None:
                continue
            if record["step"] <= restored_step and self.column in record:
                self.best[name] = self.sign * record[self.column]
            else:
                for stale in (self._meta(name), self.folder / name / "best.keras"):
                    stale.unlink(missing_ok=True)

    def update(self, name: str, model, step: int, scores: dict[str, float], checkpoint_follows: bool = True) -> bool:
        """Note an improvement; `checkpoint_follows`: the run checkpoints at this step, before its
        weights change (else they are copied now)."""
        value = float(scores[self.metric])
        if not is_finite(value) or self.sign * value >= self.best.get(name, float("inf")):
            return False
        self.pending[name] = _Improved(step, value, None if checkpoint_follows else model.get_weights())
        self.best[name] = self.sign * value
        return True

    def flush(self, models: dict, step: int) -> None:
        """Write best.keras and best.json of each member improved since the last flush; before
        the checkpoint at `step` (a kill between the two leaves files the resumed run forgets)."""
        for name, improved in sorted(self.pending.items()):
            model = models[name]
            if improved.weights is None:
                if improved.step != step:
                    raise AssertionError(f"best weights of {name} at step {improved.step} were not kept for the checkpoint at {step}")
                export_model(model, self.folder / name / "best.keras")
            else:
                live = model.get_weights()
                model.set_weights(improved.weights)
                try:
                    export_model(model, self.folder / name / "best.keras")
                finally:
                    model.set_weights(live)
            atomic_write_text(self._meta(name), json.dumps({"step": improved.step, self.column: improved.value}) + "\n")
        self.pending.clear()

    def _meta(self, name: str) -> Path:
        return self.folder / name / "best.json"

    def _record(self, name: str) -> dict | None:
        try:
            return json.loads(self._meta(name).read_text())
        except (OSError, ValueError):
            return None


@dataclass(frozen=True)
class _Improved:
    step: int
    value: float
    weights: list | None  # None: the model's live weights are these (a checkpoint follows at once)
