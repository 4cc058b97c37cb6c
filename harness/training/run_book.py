"""run.json while a run trains: the record it starts with (fresh or resumed), every update written
at once (atomically), and how the run ended. The Runner and the end-of-run actions write through
this book only; the record itself is rundir.record.RunRecord."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

from harness.config.schema import ExperimentConfig
from harness.core.placement import device_names, tensorflow_hardware
from harness.data.resolve import data_facts
from harness.errors import HarnessError
from harness.members.zoo import weights_digest
from harness.rundir import MemberRecord, RunDir, RunRecord, RunStatus, this_machine, utc_now, versions
from harness.training.failures import translate


class RunBook:
    def __init__(self, run: RunDir, record: RunRecord, previous_status: RunStatus | None = None):
        self.run = run
        self.record = record
        self.previous_status = previous_status  # a resumed run's status before this process

    @classmethod
    def open(cls, config: ExperimentConfig, run: RunDir, placement, scan, resuming: bool) -> "RunBook":
        """The record a run starts with: a resumed run's own, now `running` again on this machine's
        devices; or a fresh one."""
        facts = {"devices": device_names(), "hardware": this_machine(**tensorflow_hardware()), "placement": placement.plan, "data": data_facts(config.data, scan)}
        if resuming:
            record = run.read_record()
            previous = record.status
            record.update(status=RunStatus.RUNNING, ended=None, error=None, **facts)
            record.run_token = record.run_token or uuid.uuid4().hex  # run.json from before tokens
            return cls(run, record, previous)
        record = RunRecord(
            name=config.name, run_id=run.run_id, status=RunStatus.RUNNING,
            run_token=uuid.uuid4().hex,  # saved in every checkpoint: which run it belongs to
            started=utc_now(), versions=versions(), config_fingerprint=config.fingerprint(), weights_files=weights_fingerprints(config),
            config=config.to_dict(), deterministic=config.train.deterministic, total_steps=config.total_steps, started_in=os.getcwd(), **facts,
        )
        return cls(run, record)

    def write(self) -> None:
        self.run.write_record(self.record)

    def update(self, **changes: Any) -> None:
        """Change these fields and write run.json."""
        self.record.update(**changes)
        self.write()

    def track(self, records: dict[str, MemberRecord]) -> None:
        """The members' records are the run record's: a status changed on one is in the next write."""
        self.record.models = records

    def said_running_when_resumed(self) -> bool:
        return self.previous_status == RunStatus.RUNNING

    def mark_interrupted(self, by: str) -> None:
        self.update(status=RunStatus.INTERRUPTED, ended=utc_now(), interrupted_by=by)

    def mark_failed(self, exc: BaseException) -> bool:
        """run.json says how the run ended; False if it could not be written (the disk may be what
        failed: the original error matters more)."""
        if not self.run.path.is_dir():
            return True  # a new run removed whole: there is nothing to mark
        status = RunStatus.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED
        message = exc.render() if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
        try:
            self.update(status=status, ended=utc_now(), error=message)
        except OSError:
            return False
        return True

    def failed(self, exc: BaseException) -> BaseException:
        """What to raise for `exc` (harness's own error for a known cause), once run.json says how
        the run ended, or says why it could not."""
        recorded = self.mark_failed(exc)
        translated = translate(exc, self.run.path)
        if isinstance(translated, HarnessError) and not recorded:
            translated.problems.append(
                f"{self.run.run_json} could not be updated, so it may still say status: running; "
                f"no process holds the run, and harness resume {self.run.path} continues it"
            )
        return translated

    def warn_if_killed_before(self) -> None:
        if self.said_running_when_resumed():
            print(
                f"harness: {self.run.run_json} said running, but no process held the run: it was killed "
                "(or stopped by a full disk, or at once by a second Ctrl-C) without updating it",
                file=sys.stderr,
            )


def weights_fingerprints(config: ExperimentConfig) -> dict[str, str]:
    """Each weights file the models start from -> its content's fingerprint (run.json `weights_files`)."""
    return {str(path): weights_digest(path) for path in dict.fromkeys(m.weights for m in config.models if m.weights is not None)}
