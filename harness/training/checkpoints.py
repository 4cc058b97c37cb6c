"""Checkpoints of everything a run needs to continue: every model and optimizer (slots and
iteration counts, nested models included), each member's divergence flags, and the global step.

The data position needs no state of its own: the train pipeline is a pure function of the step.

Robustness, in the order `restore_newest_valid` applies it:
  1. folders left by a save that was killed (`*_temp*`) are removed;
  2. candidates are found by listing `ckpt-N.index` files, not by trusting the `checkpoint`
     pointer file, which a kill or a full disk can leave missing or garbled;
  3. newest first, each is restored and verified: every variable of the run must be matched by the
     checkpoint and every value in it used (`assert_consumed`); a partial or corrupt one is skipped
     with a message, and the previous one tried;
  4. no valid checkpoint while some exist is an error, never a silent restart from step 0.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.core.backend import import_tf
from harness.errors import ConfigError

tf = import_tf()

_CKPT_INDEX = re.compile(r"^ckpt-(\d+)\.index$")


class NoValidCheckpoint(ConfigError):
    """Checkpoints exist but none fits this run's models (changed code, corrupt files)."""


def make_checkpoint(members, global_step) -> "tf.train.Checkpoint":
    """Every member's objects (models, optimizers, flags: whatever its kind holds), nested models
    included, and the global step."""
    items = {"global_step": global_step}
    for i, m in enumerate(members):
        # Positions, not names, key the objects: the config check keeps them in the same order,
        # and positions keep the keys valid identifiers whatever the model is called.
        for key, obj in m.checkpoint_items().items():
            items[f"member_{i}_{key}"] = obj
    return tf.train.Checkpoint(**items)


@dataclass(frozen=True)
class Restored:
    step: int
    path: str | None
    skipped: list[str]


def save(checkpoint, directory: Path, step: int, keep: int) -> str:
    """Save as ckpt-<step> and delete all but the newest `keep` checkpoints."""
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint.write(str(directory / f"ckpt-{step}"))
    for old_step in list_checkpoint_steps(directory)[keep:]:
        for file in directory.glob(f"ckpt-{old_step}.*"):
            file.unlink(missing_ok=True)
    _write_pointer(directory, step)
    return path


def _write_pointer(directory: Path, step: int) -> None:
    # Keep TensorFlow's own pointer file current, for users who open the folder with TF tools.
    # harness itself never relies on it.
    from harness.training.rundir import atomic_write_text

    atomic_write_text(
        directory / "checkpoint",
        f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n',
    )


def list_checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the complete-looking checkpoints in `directory`, newest first."""
    if not directory.is_dir():
        return []
    steps = []
    for file in directory.iterdir():
        match = _CKPT_INDEX.match(file.name)
        if match and any(directory.glob(f"ckpt-{match[1]}.data-*")):
            steps.append(int(match[1]))
    return sorted(steps, reverse=True)


def remove_leftovers(directory: Path) -> list[str]:
    """Delete what a killed save leaves: TensorFlow's temp folders and half-written files."""
    removed = []
    if not directory.is_dir():
        return removed
    for item in directory.iterdir():
        if "_temp" in item.name or item.name.endswith(".tmp") or item.name.startswith(".checkpoint."):
            shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink(missing_ok=True)
            removed.append(item.name)
    return removed


def restore_newest_valid(checkpoint, directory: Path) -> Restored:
    """Restore the newest checkpoint that restores completely; step 0 if there is none at all."""
    remove_leftovers(directory)
    skipped = []
    for step in list_checkpoint_steps(directory):
        path = str(directory / f"ckpt-{step}")
        try:
            status = checkpoint.read(path)
            status.assert_consumed()
        except Exception as exc:  # corrupt file, missing object, shape mismatch: all mean "not this one"
            skipped.append(f"ckpt-{step}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        return Restored(step=step, path=path, skipped=skipped)
    if skipped:
        raise NoValidCheckpoint(
            f"no checkpoint in {directory} restores completely; refusing to restart from step 0",
            skipped,
        )
    return Restored(step=0, path=None, skipped=[])
