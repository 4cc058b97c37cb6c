"""run.json as one typed record: what a run is, how far it got and how each member ended.

Every writer goes through `RunRecord` (RunDir.read_record / write_record) and every reader may.
Statuses are enumerations whose values are the strings run.json has always held, so a record
compares equal to the old literals and old runs load unchanged; keys this version does not know
(written by a newer harness, or by a user) are kept in `extra` and written back as they were.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any


class RunStatus(str, Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"  # SIGTERM / Ctrl-C: a checkpoint was saved, `harness resume` continues
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class MemberStatus(str, Enum):
    OK = "ok"
    DIVERGED = "diverged"  # a non-finite loss: frozen at that step
    STOPPED = "stopped"  # early stopping
    DROPPED = "dropped"  # cut by a race rung
    OOM = "oom"  # its group did not fit its device

    def __str__(self) -> str:
        return self.value

    @property
    def trains(self) -> bool:
        """Still in the fused step (a diverged member stays, frozen by its flag)."""
        return self not in (MemberStatus.STOPPED, MemberStatus.DROPPED)

    @property
    def finished(self) -> bool:
        """Trained to its end, by the schedule or by early stopping: its scores are final."""
        return self in (MemberStatus.OK, MemberStatus.STOPPED)

    @property
    def failed(self) -> bool:
        """Went wrong (diverged, did not fit its device): a regression, unlike a stop or a race's cut."""
        return self in (MemberStatus.DIVERGED, MemberStatus.OOM)


@dataclass
class MemberRecord:
    """One member in run.json `models`: its status and the step it changed, and its cost figures."""

    params: int | None = None  # the served network's (summary.csv, plots, compare)
    status: MemberStatus = MemberStatus.OK
    changed_at_step: int = 0
    diverged_step: int | None = None
    flops_per_example: int | None = None
    ms_per_step: float | None = None
    images_per_s: float | None = None
    # What it costs to serve (training/serve.py): inference at batch 1 and at output.serve_batch.
    latency_ms: float | None = None
    latency_p90_ms: float | None = None
    serve_images_per_s: float | None = None
    serve_peak_mb: float | None = None
    model_mb: float | None = None
    higher_is_better: list[str] = field(default_factory=list)  # the kind's own metrics that go up when better
    trained_params: int | None = None  # every network trained: more than params for a GAN (its discriminator)
    # How much its output varies from image to image, as a share of the targets' (training/output_spread.py)
    output_spread: float | None = None
    # The same of the weights training ended on, where the ranking scored others (a test split
    # with weights chosen on validation; training/held_out.py): None where they are the same.
    last_output_spread: float | None = None

    def __post_init__(self):
        self.status = MemberStatus(self.status)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemberRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def mark_diverged(self, step: int) -> None:
        self.status, self.changed_at_step, self.diverged_step = MemberStatus.DIVERGED, step, step

    def mark_stopped(self, step: int) -> None:
        self.status, self.changed_at_step = MemberStatus.STOPPED, step

    def mark_dropped(self, step: int) -> None:
        self.status, self.changed_at_step = MemberStatus.DROPPED, step

    @property
    def frozen_at(self) -> int | None:
        """The last step this member trained (diverged, stopped or dropped); None while it trains."""
        return None if self.status == MemberStatus.OK else self.changed_at_step


OPTIONAL = ("hardware", "weights_files", "error", "interrupted_by", "race", "rebuilds", "groups", "started_in")


@dataclass
class RunRecord:
    """run.json. Fields in the order the file has always listed them; `extra` holds the rest."""

    name: str = ""
    run_id: str = ""
    status: RunStatus = RunStatus.RUNNING
    run_token: str | None = None  # saved in every checkpoint: which run it belongs to
    started: str | None = None
    ended: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    devices: Any = None  # the devices a run saw (a group driver: its slots and engine)
    hardware: dict[str, Any] | None = None  # the machine its timings come from (rundir.hardware); None before it was recorded
    placement: Any = None
    config_fingerprint: str | None = None
    weights_files: dict[str, str] = field(default_factory=dict)  # each models.*.weights path -> its content's fingerprint as the run started
    data: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    deterministic: bool | None = None
    total_steps: int | None = None
    steps_done: int = 0
    checkpoints: list[int] = field(default_factory=list)  # the run's own completed saves, newest first
    models: dict[str, MemberRecord] = field(default_factory=dict)
    resumes: list[dict[str, Any]] = field(default_factory=list)  # each resume: when, from which step, rows redone
    race: dict[str, Any] | None = None  # train.race: the rungs decided so far
    rebuilds: list[dict[str, Any]] = field(default_factory=list)  # each time members left the fused step
    warnings: list[str] = field(default_factory=list)
    groups: list[dict[str, Any]] | None = None  # a run of several groups: each group's members and status
    error: str | None = None
    interrupted_by: str | None = None
    started_in: str | None = None  # the folder the run was started from: its config's relative paths are read from there
    extra: dict[str, Any] = field(default_factory=dict)  # timing, test, mlflow, groups, trace_count, ...

    def __post_init__(self):
        self.status = RunStatus(self.status)
        self.models = {n: m if isinstance(m, MemberRecord) else MemberRecord.from_dict(m) for n, m in self.models.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        known = {f.name for f in fields(cls)} - {"extra"}
        record = cls(**{k: v for k, v in data.items() if k in known})
        record.extra = {k: v for k, v in data.items() if k not in known}
        return record

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name == "models":
                value = {n: m.as_dict() for n, m in value.items()}
            elif isinstance(value, Enum):
                value = value.value
            if not value and f.name in OPTIONAL:
                continue  # written only when there is one
            out[f.name] = value
        return {**out, **self.extra}

    @property
    def stopped_short(self) -> bool:
        """Not completed and short of its last step (interrupted, failed, training again): its
        scores, and a summary.csv `harness report` wrote for it, are from where it stopped."""
        return self.status != RunStatus.COMPLETED and self.total_steps is not None and self.steps_done < self.total_steps

    def _scored_test(self, member: str) -> dict[str, Any]:
        """run.json `test.members.<member>`: which weights the test split scored and their step."""
        return (self.extra.get("test") or {}).get("members", {}).get(member) or {}

    def chose_weights(self, member: str) -> bool:
        """Whether `member`'s scores on the held-out test split are of its weights chosen on
        validation (models/<member>/best.keras); otherwise (no test split, `select_by: final`, no
        best state on disk) every score the run ranks by is of its end-of-run weights (model.keras)."""
        return self._scored_test(member).get("weights") == "best"

    def scored_step(self, member: str) -> int | None:
        """The step of the member's weights the test split scored; None without a test score."""
        return self._scored_test(member).get("step")

    def chose_any_weights(self) -> bool:
        """Whether the test split scored some member's weights chosen on validation (`chose_weights`):
        what the verdict and samples.png say the scores are of."""
        return any(self.chose_weights(member) for member in self.models)

    def scored_test(self) -> bool:
        """Whether the held-out test split was scored (run.json `test`): a run does at its end, so
        one stopped before (interrupted, failed) has no test score yet."""
        return bool(self.extra.get("test"))

    def scored_file(self, member: str) -> str:
        """The file in models/<member>/ of the weights the ranking scored (`chose_weights`)."""
        return "best.keras" if self.chose_weights(member) else "model.keras"

    def update(self, **changes: Any) -> None:
        """Set fields by name; a name the record does not type goes to `extra`."""
        known = {f.name for f in fields(self)} - {"extra"}
        for key, value in changes.items():
            if key in known:
                setattr(self, key, value)
            else:
                self.extra[key] = value
        self.__post_init__()

    def get(self, key: str, default: Any = None) -> Any:
        """A field or an extra key by name, for readers of optional facts (`race`, `timing`)."""
        if key in {f.name for f in fields(self)} - {"extra"}:
            value = getattr(self, key)
            return default if value is None else value
        return self.extra.get(key, default)
