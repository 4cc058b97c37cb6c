"""Step 4 of a run: restore the newest checkpoint that restores completely, and forget what was
measured after it (those rows are redone, and recorded once)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.outputs.writers import truncate_rows_after
from harness.rundir import RunDir, RunRecord, utc_now, version_changes, versions
from harness.training import checkpoints as ckpt


def restore_run(checkpoint, run: RunDir, record: RunRecord, resuming: bool) -> int:
    """The step training continues from (0 for a fresh run); `record` learns which checkpoints
    are the run's own and, on resume, when and from where it resumed."""
    folder = run.checkpoints
    recorded = record.checkpoints if resuming else []
    restored = ckpt.restore_newest_valid(checkpoint, folder, recorded)
    for reason in restored.skipped:
        print(f"harness: skipped checkpoint {reason}", file=sys.stderr)
    if restored.note:
        print(f"harness: {restored.note}", file=sys.stderr)
    # The run's own completed saves from here on: none after the restored step survives.
    own = ckpt.list_checkpoint_steps(folder) if recorded is None else recorded
    record.checkpoints = [s for s in own if 0 < s <= restored.step]
    if resuming:
        where = f"step {restored.step} ({Path(restored.path).name})" if restored.path else "step 0 (no checkpoint was written yet)"
        print(f"harness: resuming {run.path} from {where}", file=sys.stderr)
    dropped = truncate_rows_after(run.losses_csv, restored.step)
    truncate_rows_after(run.val_scores_csv, restored.step)
    if resuming:
        resumed = {"at": utc_now(), "from_step": restored.step, "rows_redone": dropped, "skipped_checkpoints": restored.skipped}
        record.resumes.append(resumed | _other_versions(record, restored.step))
    return restored.step


def _other_versions(record: RunRecord, step: int) -> dict:
    """`{"versions": {package: now}}` for what this process runs at other versions than the run
    started with (said on stderr: the steps from `step` on are theirs), else nothing. run.json's
    `versions` stay the run's first: what compare and nightly name."""
    now = versions()
    changed = version_changes(record.versions, now)
    if not changed:
        return {}
    said = ", ".join(f"{package} {change}" for package, change in changed.items())
    print(f"harness: warning: resuming with other versions than the run started with ({said}): the steps from {step} on are "
          "computed by these, the earlier ones were not", file=sys.stderr)
    return {"versions": {package: str(now.get(package, "-")) for package in changed}}
