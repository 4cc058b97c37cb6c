"""Checkpoints of everything a run needs to continue: every model and optimizer (slots and
iteration counts, nested models included), each member's divergence flags, the global step, and
the run's token, which says which run a checkpoint belongs to.

The data position needs no state of its own: the train pipeline is a pure function of the step.

Which checkpoints are the run's own: run.json `checkpoints` lists the steps of the run's completed
saves (a save is recorded after it returns), and each checkpoint carries the run's token. Only
those are restored or pruned: a checkpoint copied in from elsewhere is never restored and never
makes the run's own disappear. Restoring, in order (`restore_newest_valid`):
  1. `checkpoints` must be a folder (or absent);
  2. folders left by a save that was killed (`*_temp*`) are removed;
  3. candidates are the recorded steps (all `ckpt-N.index` files for a run.json from before the
     record existed), found by listing files, never by TensorFlow's `checkpoint` pointer file;
  4. newest first, each is checked (its files, its token) and restored completely
     (`assert_consumed`); one that fails is named with the reason and the previous one tried;
  5. none restores: if the run had completed a checkpoint, refuse (exit 2) naming what is wrong,
     never restart silently; if it never had (killed during its first save), start at step 0.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.backend import import_tf
from harness.errors import ConfigError
from harness.rundir import atomic_write_text

tf = import_tf()

_CKPT_INDEX = re.compile(r"^ckpt-(\d+)\.index$")
# The run says what its periodic writes cost when they take more than this share of training's
# wall time (and at least WRITES_MIN_S: a short run's few seconds are not worth a warning), and
# proposes a checkpoint interval that would bring them near WRITES_TARGET.
WRITES_SHARE, WRITES_MIN_S, WRITES_TARGET = 0.15, 10.0, 0.05
_TOKEN_KEY = "run_token/.ATTRIBUTES/VARIABLE_VALUE"


class NoValidCheckpoint(ConfigError):
    """The run completed checkpoints but none restores (changed code, corrupt or missing files)."""


@dataclass(frozen=True)
class RunCheckpoint:
    """What a checkpoint of this run holds, with and without the run's token (checkpoints written
    before tokens existed are restored without it)."""

    with_token: "tf.train.Checkpoint"
    without_token: "tf.train.Checkpoint"
    token: str


def make_checkpoint(members, global_step, token: str) -> RunCheckpoint:
    """Every member's objects (models, optimizers, flags: whatever its kind holds), nested models
    included, the global step and the run's token."""
    items = {"global_step": global_step}
    for i, m in enumerate(members):
        # Positions, not names, key the objects: the config check keeps them in the same order,
        # and positions keep the keys valid identifiers whatever the model is called.
        for key, obj in m.checkpoint_items().items():
            items[f"member_{i}_{key}"] = obj
    with tf.device("/cpu:0"):
        token_variable = tf.Variable(token, dtype=tf.string, trainable=False, name="run_token")
    return RunCheckpoint(tf.train.Checkpoint(run_token=token_variable, **items), tf.train.Checkpoint(**items), token)


@dataclass(frozen=True)
class Restored:
    step: int
    path: str | None
    skipped: list[str] = field(default_factory=list)  # why each candidate was not used
    note: str | None = None  # what the user should know about where the run starts


def check_folder(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise ConfigError(
            f"{directory} is a file, not the run's checkpoints folder; move it away (harness never deletes it) "
            "and resume again"
        )


def save(checkpoint: RunCheckpoint, directory: Path, step: int) -> str:
    """Write ckpt-<step>. The caller records it as the run's own once this returns."""
    check_folder(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint.with_token.write(str(directory / f"ckpt-{step}"))
    _write_pointer(directory, step)
    return path


def keep_newest(directory: Path, own_steps: list[int], keep: int) -> tuple[list[int], list[int]]:
    """(kept, dropped): the newest `keep` of the run's own steps, and the rest. The caller records
    `kept` first, then calls `delete` on `dropped`: a kill in between leaves files, never a record
    of files that are gone."""
    ordered = sorted(set(own_steps), reverse=True)
    return ordered[:keep], ordered[keep:]


def size_mb(directory: Path, step: int) -> float:
    return sum(f.stat().st_size for f in directory.glob(f"ckpt-{step}.*")) / 2**20


def write_cost_warning(writes_s: float, training_s: float, every: int, total_steps: int, checkpoint_mb: float) -> str | None:
    """What the checkpoints and best.keras files cost, when that is a large share of training, and
    the `train.checkpoint_every_steps` that would write them about WRITES_TARGET of it."""
    if training_s <= 0 or writes_s < max(WRITES_MIN_S, WRITES_SHARE * training_s):
        return None
    share = writes_s / training_s
    factor = math.ceil(share / WRITES_TARGET)
    suggested = min(every * factor, total_steps)
    often = "only at the end" if suggested >= total_steps else f"about 1/{factor} as often"
    return (
        f"checkpoints and best weights took {writes_s:.1f} s of training's {training_s:.1f} s ({share:.0%}): every {every} steps "
        f"a checkpoint writes every member's weights and optimizer state ({checkpoint_mb:,.0f} MB), and best.keras of each "
        f"member that improved; train.checkpoint_every_steps: {suggested} would write them {often}, at the cost of redoing "
        f"up to {suggested} steps after a crash (SIGTERM and SIGINT still checkpoint before exiting)"
    )


def delete(directory: Path, steps: list[int]) -> None:
    for step in steps:
        for file in directory.glob(f"ckpt-{step}.*"):
            file.unlink(missing_ok=True)


def _write_pointer(directory: Path, step: int) -> None:
    # Keep TensorFlow's own pointer file current, for users who open the folder with TF tools.
    # harness itself never relies on it.
    atomic_write_text(
        directory / "checkpoint",
        f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n',
    )


def list_checkpoint_steps(directory: Path) -> list[int]:
    """Steps of every `ckpt-N.index` in `directory`, newest first."""
    if not directory.is_dir():
        return []
    return sorted((int(m[1]) for f in directory.iterdir() if (m := _CKPT_INDEX.match(f.name))), reverse=True)


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


def restore_newest_valid(checkpoint: RunCheckpoint, directory: Path, recorded: list[int] | None) -> Restored:
    """Restore the run's newest checkpoint that restores completely (see the module's order).
    `recorded`: the run's completed saves from run.json; None for a run.json from before it."""
    check_folder(directory)
    remove_leftovers(directory)
    present = list_checkpoint_steps(directory)
    candidates = present if recorded is None else sorted(recorded, reverse=True)
    skipped = []
    for step in candidates:
        path = directory / f"ckpt-{step}"
        problem = _files_problem(directory, step)
        if problem is None:
            problem, has_token = _owner(path, checkpoint.token)
        if problem is None:
            problem = _restore(checkpoint.with_token if has_token else checkpoint.without_token, path)
        if problem is None:
            return Restored(step, str(path), skipped)
        skipped.append(f"ckpt-{step}: {problem}")
    ignored = sorted(set(present) - set(candidates))
    if recorded:
        raise NoValidCheckpoint(
            f"this run completed checkpoints at step(s) {', '.join(map(str, sorted(recorded)))} (run.json), and none of them "
            f"restores from {directory}; refusing to restart from step 0. To start over, begin a new run: "
            f"harness run {directory.parent / 'config.yaml'}",
            skipped,
        )
    if recorded is None and skipped:
        raise NoValidCheckpoint(f"no checkpoint in {directory} restores completely; refusing to restart from step 0", skipped)
    note = None
    if skipped or ignored:
        note = "no checkpoint of this run was completed (killed during its first save?): starting from step 0"
        skipped += [f"ckpt-{s}: not a completed save of this run (not in run.json): left as it is" for s in ignored]
    return Restored(0, None, skipped, note)


def _files_problem(directory: Path, step: int) -> str | None:
    index = directory / f"ckpt-{step}.index"
    if not index.is_file():
        return f"its files are missing ({index.name} and its .data files were deleted?)"
    if not any(directory.glob(f"ckpt-{step}.data-*")):
        return f"its .data files are missing (only {index.name} is there)"
    return None


def _owner(path: Path, token: str) -> tuple[str | None, bool]:
    """(why it is not this run's, or None; whether it carries a token: checkpoints written before
    tokens existed have none and are restored without one)."""
    try:
        reader = tf.train.load_checkpoint(str(path))
        if not reader.has_tensor(_TOKEN_KEY):
            return None, False
        owner = reader.get_tensor(_TOKEN_KEY)
    except Exception as exc:  # a truncated or garbled index or data file: TensorFlow raises several kinds
        return f"unreadable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", False
    owner = owner.decode() if isinstance(owner, bytes) else str(owner)
    if owner != token:
        return f"belongs to another run (token {owner[:12]}, this run's is {token[:12]}): it was copied in from elsewhere", True
    return None, True


def _restore(target, path: Path) -> str | None:
    try:
        status = target.read(str(path))
        status.assert_consumed()
    except Exception as exc:  # corrupt file, missing object, shape mismatch: all mean "not this one"
        return f"does not restore completely: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None
