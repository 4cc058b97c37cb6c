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

A member that left the fused step (stopped early, dropped by a race rung) is written once to
left/member-<i>/ and left out of the checkpoints after it (`RunCheckpoint`): a race's later
checkpoints hold only the members still racing. A checkpoint is restored with the members it
holds, and the ones it leaves out from their left/ folders; a missing or damaged one makes that
checkpoint one that does not restore, like a damaged file of its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection

from harness.core.backend import import_tf
from harness.errors import ConfigError
from harness.rundir import atomic_write_text, remove_path, replaced_whole

tf = import_tf()

_CKPT_INDEX = re.compile(r"^ckpt-(\d+)\.index$")
# The run says what its periodic writes cost when they take more than this share of training's
# wall time (and at least WRITES_MIN_S: a short run's few seconds are not worth a warning), and
# proposes a checkpoint interval that would bring them near WRITES_TARGET.
WRITES_SHARE, WRITES_MIN_S, WRITES_TARGET = 0.15, 10.0, 0.05
_TOKEN_KEY = "run_token/.ATTRIBUTES/VARIABLE_VALUE"
_MEMBER_KEY = re.compile(r"^member_(\d+)_")
LEFT = "left"  # checkpoints/left/member-<i>/: the state of a member that left the fused step


class NoValidCheckpoint(ConfigError):
    """The run completed checkpoints but none restores (changed code, corrupt or missing files)."""


@dataclass
class RunCheckpoint:
    """What a checkpoint of this run holds: every member's objects (models, optimizers, flags:
    whatever its kind holds, nested models included), the global step and the run's token
    (checkpoints written before tokens existed are restored without it).

    A member that left the fused step (stopped early, dropped by a race) never changes again, so
    its state is written once, to left/member-<i>/, and the checkpoints after it leave it out
    (`left`: the positions of the members that left, set by the run before each save). Restoring a
    checkpoint takes the members it holds from it and the others from their left/ folders."""

    members: list
    global_step: Any
    token_variable: Any
    token: str
    left: set[int] = field(default_factory=set)
    written_left: set[int] = field(default_factory=set)  # left/ folders that hold this timeline's state

    def objects(self, without: Collection[int] = (), token: bool = True) -> "tf.train.Checkpoint":
        items = {"global_step": self.global_step}
        for i in range(len(self.members)):
            if i not in without:
                items.update(self._member_items(i))
        return tf.train.Checkpoint(**items, **({"run_token": self.token_variable} if token else {}))

    def member_objects(self, i: int, token: bool = True) -> "tf.train.Checkpoint":
        return tf.train.Checkpoint(**self._member_items(i), **({"run_token": self.token_variable} if token else {}))

    def _member_items(self, i: int) -> dict[str, Any]:
        # Positions, not names, key the objects: the config check keeps them in the same order,
        # and positions keep the keys valid identifiers whatever the model is called.
        return {f"member_{i}_{key}": obj for key, obj in self.members[i].checkpoint_items().items()}

    @property
    def with_token(self) -> "tf.train.Checkpoint":
        return self.objects()

    @property
    def without_token(self) -> "tf.train.Checkpoint":
        return self.objects(token=False)


def make_checkpoint(members, global_step, token: str) -> RunCheckpoint:
    with tf.device("/cpu:0"):
        token_variable = tf.Variable(token, dtype=tf.string, trainable=False, name="run_token")
    return RunCheckpoint(list(members), global_step, token_variable, token)


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
    for i in sorted(checkpoint.left - checkpoint.written_left):  # before the first checkpoint without them
        _write_left(checkpoint, directory, i)
        checkpoint.written_left.add(i)
    path = checkpoint.objects(without=checkpoint.left).write(str(directory / f"ckpt-{step}"))
    _write_pointer(directory, step)
    return path


def _write_left(checkpoint: RunCheckpoint, directory: Path, i: int) -> None:
    """left/member-<i>/ckpt, whole or not at all: written beside it, then renamed. One there
    already is another timeline's (the run resumed from before this member left): no checkpoint
    the run restores can need it."""
    final = directory / LEFT / f"member-{i}"
    with replaced_whole(final, final.with_name(f".member-{i}-partial")) as partial:
        checkpoint.member_objects(i).write(str(partial / "ckpt"))


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
        f"a checkpoint writes the weights and optimizer state of every member still training ({checkpoint_mb:,.0f} MB), and best.keras of each "
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
            remove_path(item)
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
        problem = _restore_candidate(checkpoint, directory, step)
        if problem is None:
            return Restored(step, str(directory / f"ckpt-{step}"), skipped)
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


def _restore_candidate(checkpoint: RunCheckpoint, directory: Path, step: int) -> str | None:
    """Restore ckpt-<step> completely, with the members it leaves out from left/; or say why not."""
    path = directory / f"ckpt-{step}"
    problem = _files_problem(directory, step)
    if problem is None:
        problem, has_token, held = _inspect(path, checkpoint.token)
        absent = set(range(len(checkpoint.members))) - held
    if problem is None:
        problem = _restore(checkpoint.objects(without=absent, token=has_token), path)
    for i in sorted(absent) if problem is None else ():
        if problem := _restore_left(checkpoint, directory, i, has_token):
            return problem
    if problem is None:
        checkpoint.written_left = set(absent)  # their left/ folders hold this timeline's state
    return problem


def _files_problem(directory: Path, step: int) -> str | None:
    index = directory / f"ckpt-{step}.index"
    if not index.is_file():
        return f"its files are missing ({index.name} and its .data files were deleted?)"
    if not any(directory.glob(f"ckpt-{step}.data-*")):
        return f"its .data files are missing (only {index.name} is there)"
    return None


def _inspect(path: Path, token: str) -> tuple[str | None, bool, set[int]]:
    """One read of a checkpoint: (why it is not this run's, or None; whether it carries a token:
    checkpoints written before tokens existed have none and are restored without one; the
    positions of the members it holds)."""
    try:
        reader = tf.train.load_checkpoint(str(path))
        held = {int(m[1]) for key in reader.get_variable_to_shape_map() if (m := _MEMBER_KEY.match(key))}
        if not reader.has_tensor(_TOKEN_KEY):
            return None, False, held
        owner = reader.get_tensor(_TOKEN_KEY)
    except Exception as exc:  # a truncated or garbled index or data file: TensorFlow raises several kinds
        return f"unreadable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", False, set()
    owner = owner.decode() if isinstance(owner, bytes) else str(owner)
    if owner != token:
        return f"belongs to another run (token {owner[:12]}, this run's is {token[:12]}): it was copied in from elsewhere", True, held
    return None, True, held


def _restore_left(checkpoint: RunCheckpoint, directory: Path, i: int, has_token: bool) -> str | None:
    """A member the checkpoint leaves out, from left/member-<i>/ (written when it left the step)."""
    path = directory / LEFT / f"member-{i}" / "ckpt"
    name = getattr(checkpoint.members[i], "name", f"member {i}")
    if not path.with_suffix(".index").is_file():
        return f"{name} left the run before it, and its state, {path.parent}, is missing"
    problem = _inspect(path, checkpoint.token)[0] if has_token else None
    if problem is None:
        problem = _restore(checkpoint.member_objects(i, token=has_token), path)
    return None if problem is None else f"{name}'s state from when it left the run ({path.parent}): {problem}"


def _restore(target, path: Path) -> str | None:
    try:
        status = target.read(str(path))
        status.assert_consumed()
    except Exception as exc:  # corrupt file, missing object, shape mismatch: all mean "not this one"
        return f"does not restore completely: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None
