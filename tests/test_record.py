"""run.json through one typed record: old runs load, unknown keys survive, statuses are enums."""

from __future__ import annotations

import json

import pytest

from harness.errors import ConfigError
from harness.rundir import MemberStatus, RunDir, RunRecord, RunStatus


def test_an_old_run_json_loads_and_is_written_back_with_its_unknown_keys(tmp_path):
    old = {"status": "completed", "name": "smoke", "run_id": "20261101-000000", "started": "2026-11-01T00:00:00+00:00",
           "models": {"unet": {"params": 10, "status": "stopped", "changed_at_step": 4, "a_future_key": 1}},
           "timing": {"fused_ms_per_step": 3.0}, "someone_elses": [1, 2]}
    run = RunDir(tmp_path)
    run.run_json.write_text(json.dumps(old))
    record = run.read_record()
    assert record.status is RunStatus.COMPLETED and record.status == "completed"
    assert record.models["unet"].status is MemberStatus.STOPPED and record.models["unet"].changed_at_step == 4
    assert record.get("timing") == {"fused_ms_per_step": 3.0} and record.extra["someone_elses"] == [1, 2]
    run.write_record(record)
    again = json.loads(run.run_json.read_text())
    assert again["someone_elses"] == [1, 2] and again["timing"] == old["timing"] and again["status"] == "completed"
    assert again["models"]["unet"]["status"] == "stopped"


def test_update_types_what_it_knows_and_keeps_the_rest():
    record = RunRecord(name="x")
    record.update(status="interrupted", models={"a": {"status": "dropped"}}, trace_count=3)
    assert record.status is RunStatus.INTERRUPTED and record.models["a"].status is MemberStatus.DROPPED
    assert record.extra == {"trace_count": 3} and "error" not in record.to_dict()
    assert not MemberStatus.DROPPED.trains and MemberStatus.DIVERGED.trains and MemberStatus.STOPPED.finished


def test_a_run_json_harness_cannot_read_names_the_file(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(ConfigError, match="no run.json"):
        run.read_record()
    run.run_json.write_text(json.dumps({"status": "exploded"}))
    with pytest.raises(ConfigError, match="run.json"):
        run.read_record()


def test_report_of_a_run_that_did_not_complete_says_so_and_what_to_do(tmp_path):
    """`harness report` of a run interrupted before its first evaluation printed a ranking of
    dashes and nothing about why."""
    from harness.outputs.derived import unfinished_note

    run = RunDir(tmp_path)
    run.write_record(RunRecord(name="smoke", run_id="r1", status=RunStatus.INTERRUPTED, total_steps=40, steps_done=4))
    assert unfinished_note(tmp_path) == f"This run is interrupted at step 4 of 40: the report holds what it had by then; harness resume {tmp_path} continues it."
    run.write_record(RunRecord(name="smoke", run_id="r1", status=RunStatus.FAILED, total_steps=40, steps_done=12, error="disk full: /x\nmore"))
    assert unfinished_note(tmp_path).endswith("failed at step 12 of 40: the report holds what it had by then; run.json says why (disk full: /x).")
    run.write_record(RunRecord(name="smoke", run_id="r1", status=RunStatus.RUNNING, total_steps=40, steps_done=8))
    assert unfinished_note(tmp_path).startswith("This run stopped without a word (killed; run.json still says running) at step 8 of 40")
    run.write_record(RunRecord(name="smoke", run_id="r1", status=RunStatus.COMPLETED, total_steps=40, steps_done=40))
    assert unfinished_note(tmp_path) is None


def test_a_run_is_stopped_short_when_not_completed_before_its_last_step():
    from harness.rundir.record import RunRecord

    def record(status, done, total):
        return RunRecord.from_dict({"status": status, "steps_done": done, "total_steps": total})

    assert record("interrupted", 4, 100).stopped_short and record("running", 4, 100).stopped_short
    assert not record("completed", 4, 100).stopped_short  # early stopping, a race: completed short of total_steps
    assert not record("failed", 100, 100).stopped_short  # failed at its end: its scores are final
    assert not record("interrupted", 0, None).stopped_short  # nothing known to be short of
