"""What a run records about its own pace (run.json `timing`), and what a run returns to Python
callers. Each member's record is rundir.record.MemberRecord."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.config.naming import model_of

if TYPE_CHECKING:
    import pandas as pd

    from harness.config.schema import ExperimentConfig


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

    @classmethod
    def read(cls, run, config: ExperimentConfig, info: dict[str, Any], models: Mapping[str, Any]) -> "RunResult":
        """The result of the run in `run` (a RunDir): its tables as written, its models as given."""
        from harness.outputs.tables import load_losses, load_summary
        from harness.rundir import RunStatus

        growing = info.get("status") != RunStatus.COMPLETED.value  # its losses.csv may end in the row being written (a kill)
        return cls(run.path, config, load_summary(run.summary_csv), load_losses(run.losses_csv, growing=growing), info, models)

    @property
    def ranked_by(self) -> str:
        """The summary column the models are ranked by: on validation until the run scores its test
        split (at its end: `ExperimentConfig.ranking_column`)."""
        from harness.rundir import RunRecord

        return self.config.ranking_column(RunRecord.from_dict(self.info).scored_test())

    @property
    def pairs(self) -> "pd.DataFrame":
        """pairs.csv: every pair of members, on the common loss and on the ranking metric."""
        return self._table("pairs.csv")

    @property
    def summary_members(self) -> "pd.DataFrame":
        """summary_members.csv (with `train.repeats` > 1): the summary's figures per seed, one row
        per member (`unet@1`, `unet@2`, ...); empty without repeats (`summary` is per member then)."""
        return self._table("summary_members.csv")

    @property
    def compare_by(self) -> "pd.DataFrame":
        """compare_by.csv (with `output.compare_by`): each group's model chosen on validation,
        compared pairwise with the other groups' (on test when there is a test split)."""
        return self._table("compare_by.csv")

    @property
    def expected_best(self) -> "pd.DataFrame":
        """expected_best.csv (with `output.compare_by`): each group's expected best score for a
        tuning budget of 1, 2, ... of the models it tried (Dodge et al. 2019)."""
        return self._table("expected_best.csv")

    @property
    def val_scores(self) -> "pd.DataFrame":
        """val_scores.csv: every validation image's scores, per evaluation and member."""
        return self._table("val_scores.csv")

    @property
    def test_scores(self) -> "pd.DataFrame":
        """test_scores.csv (with a test split): every test image's scores, per member, with the
        weights chosen on validation (`step` says which); empty without a test split."""
        return self._table("test_scores.csv")

    @cached_property
    def scored_models(self) -> "ExportedModels":
        """The models whose weights the ranking scored, read from disk when first used:
        models/<name>/best.keras where the held-out test split scored the weights chosen on
        validation, else model.keras (`models` holds the end-of-run weights)."""
        from harness.rundir import RunDir

        return ExportedModels(self.run_dir, RunDir(self.run_dir).read_record().scored_file)

    def _table(self, name: str) -> "pd.DataFrame":
        """A table of the run directory, or an empty one where the run wrote none (an empty file
        too: an output with no rows, as compare_by.csv without groups)."""
        import pandas as pd

        from harness.rundir import read_csv

        path = self.run_dir / name
        return read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()

    def __repr__(self) -> str:
        rank_by = self.ranked_by
        best = ""
        if len(self.summary) and rank_by in self.summary:
            top = self.summary.iloc[0]
            best = f", best {top['model']} ({rank_by} {float(top[rank_by]):.4f})"
        return f"RunResult({str(self.run_dir)!r}, {self.info.get('status', '?')}, {len(self.summary)} model(s){best})"


class ExportedModels(Mapping):
    """models/<name>/model.keras of a run (or the file `file_of(name)` names, model.keras where
    that is gone), each loaded (Keras safe mode) the first time it is asked for."""

    def __init__(self, run_dir: Path, file_of=lambda name: "model.keras"):
        self._folder = folder = Path(run_dir) / "models"
        self._paths = {}
        for name in sorted({p.parent.name for p in folder.glob("*/*.keras")}) if folder.is_dir() else ():
            if (path := folder / name / file_of(name)).is_file() or (path := folder / name / "model.keras").is_file():
                self._paths[name] = path
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str):
        if name not in self._paths:
            raise KeyError(self._not_here(name))
        if name not in self._loaded:
            from harness.outputs.derived import load_exported_model

            self._loaded[name] = load_exported_model(self._paths[name])
        return self._loaded[name]

    def __contains__(self, name) -> bool:
        return name in self._paths  # without loading it

    def _not_here(self, name: str) -> str:
        saved = self._folder / name / "model_saved_model"
        if saved.is_dir():  # output.export_formats: [saved_model]
            return f"{name}: exported only as a SavedModel (output.export_formats): load it with tf.saved_model.load({str(saved)!r})"
        held = ", ".join(self._paths) or "none (output.export: false, or the files were removed)"
        return _repeats_hint(name, list(self._paths)) or f"{name}: no models/{name}/model.keras in this run; its exported models: {held}"

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"ExportedModels({list(self._paths)})"


class TrainedModels(dict):
    """A run's models in memory, by member name; a name that is not one says which are."""

    def __missing__(self, name: str):
        raise KeyError(_repeats_hint(name, list(self)) or f"{name}: no such model in this run; its models: {', '.join(self)}")


def _repeats_hint(name: str, names: list[str]) -> str | None:
    seeds = [n for n in names if n != name and model_of(n) == name]
    return f"{name}: trained with repeats, each seed's model is its own: {', '.join(seeds)}" if seeds else None
