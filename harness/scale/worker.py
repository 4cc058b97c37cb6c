"""One group of a larger run, in a process of its own: `python -m harness.scale.worker GROUP_DIR`.

The group folder is a run directory like any other (config.yaml with the group's members,
run.json, losses.csv, checkpoints/, models/, tb/), so a group is trained, checkpointed and resumed
by the same code as a whole run; it only skips the run-level outputs, which the driver writes once
for every group. A group started before (killed, its node lost, its machine rebooted) resumes
from its newest checkpoint; a completed one does nothing.

The outcome is the exit code (an engine carries nothing else back): the contract's codes, and
EXIT_OUT_OF_MEMORY for a device out of memory (which the driver answers by splitting the group).
TensorFlow cannot hand device memory back inside a process, so a group never retries in place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EXIT_OUT_OF_MEMORY = 86  # between the driver and its workers only; the user sees 0 or 4


def run_group(group_dir: Path) -> int:
    import harness  # noqa: F401  (tf_keras before TensorFlow)
    from harness.errors import HarnessError, OutOfMemory
    from harness.training.actions import GROUP_END_OF_RUN
    from harness.training.entry import resume_run, run_experiment
    from harness.scale.probe_member import peak_rss_mb, rss_mb
    from harness.rundir import RunDir, atomic_write_text

    run = RunDir(group_dir)
    baseline = rss_mb()
    try:
        if run.run_json.exists():
            resume_run(run.path, end_of_run=GROUP_END_OF_RUN)
        else:
            run_experiment(run.read_config(), run.results_dir, run=run, end_of_run=GROUP_END_OF_RUN)
        # What the group really used, beside what its plan predicted (plan.json): the bench's
        # measure of the plan's accuracy.
        memory = {"peak_rss_mb": round(peak_rss_mb() - baseline, 1), "baseline_rss_mb": round(baseline, 1)}
        atomic_write_text(run.path / "memory.json", json.dumps(memory) + "\n")
    except OutOfMemory as exc:
        print(f"harness: group {run.run_id}: {exc.render()}", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    except HarnessError as exc:
        print(f"harness: group {run.run_id}: {exc.render()}", file=sys.stderr)
        return exc.exit_code
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.scale.worker GROUP_DIR", file=sys.stderr)
        return 2
    try:
        return run_group(Path(args[0]))
    except Exception:
        from harness.errors import report_bug

        return report_bug()


if __name__ == "__main__":
    from harness.leaving import leave

    leave(main())  # without the interpreter's teardown of TensorFlow, which the driver waited for: 1.8-2.8 s a group
