"""What a run records about each member and about its own pace, as typed objects (run.json holds
their dictionaries: `models`, `timing`), and what a run returns to Python callers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from harness.config.schema import ExperimentConfig


@dataclass
class MemberRecord:
    """One member in run.json `models`: its status and the step it changed, and its cost figures."""

    params: int | None = None
    status: str = "ok"  # ok, diverged, stopped (early stopping), dropped (by a race), oom (a group too big for its device)
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemberRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def mark_diverged(self, step: int) -> None:
        self.status, self.changed_at_step, self.diverged_step = "diverged", step, step

    def mark_stopped(self, step: int) -> None:
        self.status, self.changed_at_step = "stopped", step

    def mark_dropped(self, step: int) -> None:
        self.status, self.changed_at_step = "dropped", step

    @property
    def frozen_at(self) -> int | None:
        """The last step this member trained (diverged, stopped or dropped); None while it trains."""
        return None if self.status == "ok" else self.changed_at_step


def models_info(records: dict[str, MemberRecord]) -> dict[str, Any]:
    """run.json `models`: each member's record."""
    return {name: record.as_dict() for name, record in records.items()}


class StepTiming:
    """Wall time per step of the fused loop; the first call, which traces, is kept apart."""

    def __init__(self):
        self.first_call_s: float | None = None
        self.steps = 0
        self.seconds = 0.0
        self.input_wait_share: float | None = None  # from the probe at the end of the run

    def add(self, steps: int, seconds: float) -> None:
        if self.first_call_s is None:  # tracing and the pipeline's warm-up: not the steady state
            self.first_call_s = seconds
            return
        self.steps += steps
        self.seconds += seconds

    def as_dict(self) -> dict[str, Any]:
        ms = 1000.0 * self.seconds / self.steps if self.steps else None
        return {"first_call_s": _round(self.first_call_s), "fused_ms_per_step": _round(ms), "input_wait_share": self.input_wait_share}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True, repr=False)
class RunResult:
    """What a run returns to Python callers: its tables as DataFrames, run.json as `info`, and
    its models (in memory after `run`; loaded from models/<name>/model.keras on first use after
    `load_run`)."""

    run_dir: Path
    config: ExperimentConfig
    summary: pd.DataFrame
    losses: pd.DataFrame
    info: dict[str, Any]
    models: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pairs(self) -> "pd.DataFrame":
        """pairs.csv: every pair of members, on the common loss and on the ranking metric."""
        import pandas as pd

        path = self.run_dir / "pairs.csv"
        return pd.read_csv(path) if path.exists() else pd.DataFrame()

    @property
    def compare_by(self) -> "pd.DataFrame":
        """compare_by.csv (with `output.compare_by`): each group's model chosen on validation,
        compared pairwise with the other groups' (on test when there is a test split)."""
        import pandas as pd

        path = self.run_dir / "compare_by.csv"
        return pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()

    @property
    def val_scores(self) -> "pd.DataFrame":
        """val_scores.csv: every validation image's scores, per evaluation and member."""
        import pandas as pd

        path = self.run_dir / "val_scores.csv"
        return pd.read_csv(path) if path.exists() else pd.DataFrame()

    def __repr__(self) -> str:
        rank_by = self.config.ranking_column()
        best = ""
        if len(self.summary) and rank_by in self.summary:
            top = self.summary.iloc[0]
            best = f", best {top['model']} ({rank_by} {float(top[rank_by]):.4f})"
        return f"RunResult({str(self.run_dir)!r}, {self.info.get('status', '?')}, {len(self.summary)} model(s){best})"


class ExportedModels(Mapping):
    """models/<name>/model.keras of a run, each loaded (Keras safe mode) the first time it is asked for."""

    def __init__(self, run_dir: Path):
        folder = Path(run_dir) / "models"
        self._paths = {p.parent.name: p for p in sorted(folder.glob("*/model.keras"))} if folder.is_dir() else {}
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str):
        if name not in self._loaded:
            from harness.outputs.derived import load_exported_model

            self._loaded[name] = load_exported_model(self._paths[name])
        return self._loaded[name]

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"ExportedModels({list(self._paths)})"
