"""run.json through one typed record: old runs load, unknown keys survive, statuses are enums."""

from __future__ import annotations

import io
import json

import pytest

from harness.errors import ConfigError
from harness.rundir import MemberStatus, RunDir, RunRecord, RunStatus, read_csv


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
    # Stopped during the end of the run (Ctrl-C while its tables were written): nothing is left to train.
    run.write_record(RunRecord(name="smoke", run_id="r1", status=RunStatus.INTERRUPTED, total_steps=40, steps_done=40))
    assert unfinished_note(tmp_path).endswith(f"training is done: harness resume {tmp_path} does the end of the run (what a run does after its last step), "
                                              "training nothing.")
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


X86_CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw amx_tile\n"
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm sve bf16 i8mm\n"


def test_a_machine_names_the_instruction_sets_its_kernels_choose_by_and_two_cpus_of_one_name_differ_by_them():
    """Two hosts of a virtual machine both read "Intel(R) Xeon(R) Processor"; TensorFlow's CPU
    kernels choose their code by the instruction sets, so timings and fast-mode digits follow them."""
    from harness.rundir.hardware import _cpu_isa, describe, differs, this_machine

    assert _cpu_isa(X86_CPUINFO) == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "amx_tile"]
    assert _cpu_isa(ARM_CPUINFO) == ["asimd", "sve", "bf16", "i8mm"]
    assert _cpu_isa("processor\t: 0\n") is None  # the system does not say: unknown, not "none"
    assert "cpu_isa" in this_machine()

    here = {"host": "vm", "cpu": "Intel(R) Xeon(R) Processor", "cpus": 2, "cpu_isa": ["avx", "avx2", "fma"], "gpus": []}
    other_host = {**here, "cpu_isa": ["avx", "avx2", "fma", "avx512f", "amx_tile"]}
    before_isa = {key: value for key, value in here.items() if key != "cpu_isa"}  # run.json of harness 0.3.2 and earlier
    assert not differs(here, dict(here))
    assert differs(here, other_host) and describe(here) != describe(other_host)  # compare tells them apart by describe
    assert describe(here) == "vm: Intel(R) Xeon(R) Processor x2 (avx avx2 fma), no GPU"
    assert differs(here, before_isa) and describe(here) != describe(before_isa)  # not known to be the same CPU
    assert not differs(before_isa, dict(before_isa)) and not differs(here, None)


def test_one_cpu_with_onednn_on_and_off_is_two_machines_to_compare_timings_by():
    """TF_ENABLE_ONEDNN_OPTS changes the kernels on one CPU: the quickstart's step read 3.13 s with
    oneDNN off and 2.48 s on (an AMD EPYC with AVX2, where TensorFlow leaves it off)."""
    from harness.rundir.hardware import describe, differs

    off = {"host": "vm", "cpu": "AMD EPYC", "cpus": 2, "cpu_isa": ["avx", "avx2", "fma"], "onednn": False, "gpus": []}
    on, before = {**off, "onednn": True}, {key: value for key, value in off.items() if key != "onednn"}  # run.json of 0.3.3
    assert describe(off) == "vm: AMD EPYC x2 (avx avx2 fma; oneDNN off), no GPU" and describe(on).endswith("(avx avx2 fma; oneDNN on), no GPU")
    assert differs(off, on) and not differs(on, dict(on))
    assert differs(off, before) and describe(off) != describe(before)  # not known to have run the same kernels
    assert describe({**off, "cpu_isa": None, "onednn": None}) == "vm: AMD EPYC x2, no GPU"


def test_a_runs_tables_read_back_to_the_last_bit():
    """pandas before 3 parses these as ...783, ...575 and ...516 unless asked for exactness: on
    Python 3.10 (pandas 2.3) the losses read back from losses.csv differed from the run's in their
    last bit, and the bit-for-bit tests failed."""
    values = [1.7855706214904785, 1.3351234197616577, 0.9277936816215515]
    text = "step,value\n" + "".join(f"{i},{v!r}\n" for i, v in enumerate(values))
    assert read_csv(io.StringIO(text))["value"].tolist() == values
