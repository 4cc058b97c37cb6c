"""The run directory on disk: where each file lives, how a new one is made, how its config is read back."""

from __future__ import annotations

import json
import shutil
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.config.changes import fill_absent
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError, HarnessError, ResourceError
from harness.rundir.files import atomic_write_text, is_disk_full, make_folder
from harness.rundir.record import RunRecord
from harness.config.loading import apply_override, validate_config

# What `harness resume --set` may change: where it runs and how it reports, never what is trained.
RESUME_OVERRIDABLE = ("placement.", "output.progress", "output.probe_steps")


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def losses_csv(self) -> Path:
        return self.path / "losses.csv"

    @property
    def val_scores_csv(self) -> Path:
        return self.path / "val_scores.csv"

    @property
    def test_scores_csv(self) -> Path:
        return self.path / "test_scores.csv"

    @property
    def data_fingerprint_json(self) -> Path:
        """Each example's content fingerprint when the run started (real data only)."""
        return self.path / "data_fingerprint.json"

    @property
    def summary_csv(self) -> Path:
        return self.path / "summary.csv"

    @property
    def summary_members_csv(self) -> Path:
        """With `train.repeats` > 1: the summary per seed (`unet@1`, ...)."""
        return self.path / "summary_members.csv"

    def member_rows_csv(self, repeats: int) -> Path:
        """The table with one row per member: per seed with repeats, else the summary itself."""
        return self.summary_members_csv if repeats > 1 else self.summary_csv

    @property
    def plots(self) -> Path:
        return self.path / "plots"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def results_dir(self) -> Path:
        """The results folder the run lives in: results/<name>/<run_id>, or for a group of a run
        results/<name>/<run_id>/groups/<group>."""
        path = self.path.absolute()  # `harness resume .` inside the run directory
        return path.parents[3] if path.parent.name == "groups" else path.parent.parent

    @property
    def run_id(self) -> str:
        return self.path.absolute().name  # of the absolute path: `harness compare .` in a run directory

    @property
    def experiment(self) -> str:
        """The experiment's folder name (`compare RUN_ID` beside the runs has no parent to name)."""
        return self.path.absolute().parent.name

    @property
    def label(self) -> str:
        """How a run is named to people: `<experiment>/<run_id>`."""
        return f"{self.experiment}/{self.run_id}"

    def read_run_info(self) -> dict[str, Any]:
        return json.loads(self.run_json.read_text(encoding="utf-8"))

    def missing(self) -> str:
        """What to say of a run directory that is not there."""
        return f"{self.path} does not exist (a run directory was expected)"

    def read_info(self) -> dict[str, Any]:
        """run.json, or a ConfigError saying why this folder is not a readable run directory."""
        if not self.path.exists():
            raise ConfigError(self.missing())
        if not self.run_json.is_file():
            raise ConfigError(f"{self.path} is not a run directory (no run.json){runs_held(self.path)}")
        try:
            return self.read_run_info()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.run_json} cannot be read: {exc}") from None

    def read_config(self, overrides: list[str] | None = None) -> ExperimentConfig:
        """config.yaml as the run resolved it; `overrides` may change only RESUME_OVERRIDABLE keys.
        Validating it imports none of the code it names."""
        import yaml

        try:
            raw = yaml.safe_load(self.config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"{self.config_file} cannot be read: {exc}") from None
        refused = [o for o in overrides or [] if not o.strip().startswith(RESUME_OVERRIDABLE)]
        if refused:
            raise ConfigError(
                f"resume continues the same training; only where it runs may change ({', '.join(RESUME_OVERRIDABLE)}). Not allowed:",
                refused,
            )
        for override in overrides or []:
            apply_override(raw, override)
        if isinstance(raw, dict):
            fill_absent(raw)  # a run from before data.seed drew its data from its seed (config/changes.py)
        return validate_config(raw, source=str(self.config_file), accepted=True)

    def write_run_info(self, info: dict[str, Any]) -> None:
        atomic_write_text(self.run_json, json.dumps(info, indent=2, sort_keys=False) + "\n")

    def read_record(self) -> RunRecord:
        """run.json as a typed RunRecord, or a ConfigError saying why it cannot be read."""
        info = self.read_info()
        try:
            return RunRecord.from_dict(info)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.run_json} is not a run record harness can read: {exc}") from None

    @property
    def resumed_from(self) -> Path:
        """The folder `harness resume` takes to continue this run: the run a group's folder
        (<run>/groups/<group>) is part of, which resumes its groups and merges them; else its own."""
        run = self.path.parent.parent
        return run if self.path.parent.name == "groups" and (run / "run.json").is_file() else self.path

    def group(self, name: str) -> "RunDir":
        """The run directory of one of this run's groups (placement's groups: each trains apart)."""
        return RunDir(self.path / "groups" / name)

    def groups_not_merged(self) -> str | None:
        """What to say of a run trained in groups that stopped before merging them: each group
        writes its own folder, and the run's tables, models and report are made from them once every
        group is done, so its top holds none yet (None for any other run)."""
        if self.losses_csv.is_file() or not self.run_json.is_file():
            return None
        groups = self.read_record().groups or []
        if not groups:
            return None
        stopped_at = {g.get("name"): f" at step {g['steps_done']}" for g in groups if g.get("status") != "completed" and g.get("steps_done")}
        done = ", ".join(f"{g.get('name')} {g.get('status')}{stopped_at.get(g.get('name'), '')}" for g in groups)
        first = next((g.get("name") for g in groups if g.get("status") == "completed"), groups[0].get("name"))
        return (f"{self.path} trains in groups and merges their tables, models and report when every group is done; it stopped "
                f"before ({done}): harness resume {self.path} finishes it. Each group's folder has its own so far "
                f"(harness report {self.group(str(first)).path})")

    def ranking_column(self) -> str:
        """The column this run's models are ranked by: its config's, on validation until the run
        scores its test split (`ExperimentConfig.ranking_column`)."""
        return self.read_config().ranking_column(self.read_record().scored_test())

    def recorded_machine(self) -> dict[str, Any] | None:
        """run.json's `hardware`, or None: not recorded (a run from before it), or run.json
        missing or unreadable (a reader comparing machines then treats them as not known to differ)."""
        try:
            return self.read_record().hardware
        except (OSError, ValueError, HarnessError):
            return None

    def write_record(self, record: RunRecord) -> None:
        self.write_run_info(record.to_dict())


def runs_in(folder: Path) -> list[Path]:
    """The run directories (folders with a run.json) directly in `folder`, oldest first by name
    (run ids are UTC times); none when it cannot be listed."""
    try:
        return sorted((child for child in folder.iterdir() if (child / "run.json").is_file()), key=lambda p: p.name)
    except OSError:
        return []


def runs_held(folder: Path) -> str:
    """For a message about a path that is not a run: the runs it holds when it is an experiment's
    folder (`results/smoke`, typed where a run was meant), the newest named in full; the command
    that trains it when it is the experiment's config file."""
    if folder.is_file() and folder.suffix in (".yaml", ".yml"):  # the experiment's config, typed where its run was meant
        return f"; it is a config file: `harness run {folder}` trains it, and `harness runs` lists the runs it made"
    runs = runs_in(folder)
    if runs:
        return f"; it is an experiment's folder of {len(runs)} run(s), the newest {runs[-1]}"
    experiments = sorted(child.name for child in _folders_in(folder) if runs_in(child))
    if experiments:  # `results`, typed where a run was meant
        shown = ", ".join(experiments[:5]) + (f" and {len(experiments) - 5} more" if len(experiments) > 5 else "")
        return f"; it is a results folder of {len(experiments)} experiment(s) ({shown}): harness runs --results {folder} lists their runs"
    return ""


def _folders_in(folder: Path) -> list[Path]:
    try:
        return [child for child in folder.iterdir() if child.is_dir()]
    except OSError:
        return []


def beside_runs(path: Path) -> str:
    """For a message about a path that is not a run: that it sits beside runs in an experiment's
    folder (`results/smoke/history.sqlite`, `nightly.md`, `plots/`: what a glob like
    `results/smoke/*` picks up with the runs), and the glob that names only the runs."""
    runs = runs_in(path.parent) if path.name not in {"", ".", ".."} else []
    return f"; it lies in the experiment's folder beside its {len(runs)} run(s) ({path.parent / '2*'} names only the runs)" if runs else ""


def given_once(run_dirs: list[Path], command: str, why: str) -> None:
    """Refuse a run named twice on one command line (`run` and `run/`, a path and a symlink to it,
    globs that overlap): its models would be listed, or paired, with themselves."""
    seen: dict[Path, Path] = {}
    for run_dir in run_dirs:
        resolved = Path(run_dir).resolve()
        if resolved in seen:
            alias = "" if Path(run_dir) == seen[resolved] else f" (as {seen[resolved]})"
            raise ConfigError(f"{command}: {run_dir} is given twice{alias}; {why}")
        seen[resolved] = Path(run_dir)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def make_experiment_folder(config: ExperimentConfig, results_dir: Path | None = None) -> Path:
    """results/<name>/, made if missing: where an experiment's runs, plan and history live. One
    that cannot be made is named, with the options that chose it (exit 2; a full disk exit 4)."""
    return make_folder(Path(results_dir or config.output.results_dir) / config.name, "the results folder (--results DIR, output.results_dir)")


def create_run_dir(config: ExperimentConfig, results_dir: Path | None = None) -> RunDir:
    """results/<name>/<run_id>/, with a suffix if two runs start in the same second."""
    base = make_experiment_folder(config, results_dir)
    run_id = new_run_id()
    for attempt in range(1, 1000):
        candidate = base / (run_id if attempt == 1 else f"{run_id}-{attempt}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        run = RunDir(candidate)
        try:
            atomic_write_text(run.config_file, config.to_yaml())
        except OSError as exc:
            shutil.rmtree(candidate, ignore_errors=True)  # nothing half-made is left behind
            if is_disk_full(exc):
                raise ResourceError(
                    f"disk full while creating the run directory {candidate} (writing config.yaml): free some space "
                    "or choose another results folder (--results DIR); nothing was left behind"
                ) from None
            raise
        return run
    raise FileExistsError(f"could not create a new run directory under {base}")


def discard_new_run_dir(run: RunDir) -> None:
    """Remove a run directory this command made and nothing was trained in, and its experiment's
    folder if that is left empty (a first run's); another run's folder is never touched."""
    shutil.rmtree(run.path, ignore_errors=True)
    try:
        run.path.parent.rmdir()
    except OSError:  # other runs of the experiment are there
        pass


def versions() -> dict[str, str]:
    """The versions a run records; harness's is the running code's own (an editable install's
    package metadata keeps the version it was installed with)."""
    from importlib import metadata

    from harness import __version__

    found = {"python": platform.python_version()}
    for package in ("tensorflow", "tf_keras", "segmentation_models"):
        try:
            found[package] = metadata.version(package.replace("_", "-"))
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found | {"harness": __version__}


def differing_versions(recorded: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """{package: {label: version}} for each package that the runs' records ({label: run.json's
    `versions`}) do not all hold at one version; `-` where a run did not record it. Another
    TensorFlow can move every score, another harness what a run computes."""
    found = {}
    for package in sorted(set().union(*recorded.values())) if recorded else []:
        held = {label: str(versions.get(package, "-")) for label, versions in recorded.items()}
        if len(set(held.values())) > 1:
            found[package] = held
    return found


def version_changes(then: dict[str, Any], now: dict[str, Any]) -> dict[str, str]:
    """{package: "2.20.0 -> 2.21.0"} between an earlier run's recorded versions and these; {}
    when either recorded none (nothing is known to differ)."""
    if not then or not now:
        return {}
    return {package: f"{held['then']} -> {held['now']}" for package, held in differing_versions({"then": then, "now": now}).items()}
