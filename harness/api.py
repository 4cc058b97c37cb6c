"""The Python API: the same operations as the CLI, returning pandas DataFrames."""

from __future__ import annotations

from pathlib import Path

from harness.config.schema import ExperimentConfig
from harness.config.loading import Overrides, as_overrides, load_config
from harness.errors import ConfigError
from harness.outputs import pool

__all__ = ["load_config", "run", "plan", "resume", "load_run", "nightly", "history", "compare", "compare_pairs"]


def run(config: ExperimentConfig | str | Path | dict, overrides: Overrides = None, results_dir: str | Path | None = None):
    """Train every model of the experiment together; return a `RunResult` with
    `.summary` and `.losses` DataFrames, `.run_dir` and `.info` (run.json)."""
    from harness.training.preflight import before_tensorflow

    if overrides or not isinstance(config, ExperimentConfig):
        config = load_config(config, overrides)
    results = Path(results_dir) if results_dir else None
    config, scan = before_tensorflow(config, results)  # paths, module names, the data's files: seconds
    pool.start(1)  # one output process loads its libraries while this one loads TensorFlow (the rest: pool.grow)
    from harness.scale.launch import start_run

    return start_run(config, results, scan=scan)


def plan(config: ExperimentConfig | str | Path | dict, overrides: Overrides = None, results_dir: str | Path | None = None):
    """`harness plan`: each model measured alone (cached) and packed into groups, without
    training; returns the `Plan` (`.models`, `.groups`, `.estimated_s`, `.race_estimated_s`, `.to_json()`) and writes
    results/<name>/plan.json."""
    return planned(config, overrides, results_dir)[0]


def planned(config: ExperimentConfig | str | Path | dict, overrides: Overrides = None, results_dir: str | Path | None = None):
    """`plan`, and where its plan.json was written (`harness plan` prints it)."""
    from harness.training.preflight import check_module_paths

    if overrides or not isinstance(config, ExperimentConfig):
        config = load_config(config, overrides)
    check_module_paths(config)  # before TensorFlow's import, as run() does
    from harness.scale.launch import plan_only

    return plan_only(config, Path(results_dir) if results_dir else None)


def resume(run_dir: str | Path, overrides: Overrides = None, accept_changed_data: bool = False):
    """Continue an interrupted run from its newest valid checkpoint; returns a `RunResult`.
    `overrides` may change only where it runs (`placement.*`). A run whose data files changed
    content since it started is refused (exit 3) unless `accept_changed_data`."""
    from harness.rundir import RunDir, RunStatus
    from harness.training.preflight import check_module_paths, refuse_data_elsewhere, refuse_locked

    run = RunDir(Path(run_dir))
    run.read_info()  # not a run directory: said before TensorFlow's import
    refuse_locked(run.path)  # exit 5 too
    if run.read_record().status == RunStatus.COMPLETED:  # nothing to train: its code is not asked for
        from harness.training.entry import completed_result

        return completed_result(run, as_overrides(overrides))
    config = run.read_config(as_overrides(overrides))
    refuse_data_elsewhere(run, config)  # asked from another folder than the run's own
    check_module_paths(config)  # and code that cannot be found
    pool.start(1)
    from harness.scale.launch import resume as resume_any

    return resume_any(Path(run_dir), as_overrides(overrides), accept_changed_data)


def load_run(run_dir: str | Path):
    """Read a finished (or interrupted) run directory back as a `RunResult`."""
    from harness.rundir import RunDir
    from harness.training.entry import load_result

    run = RunDir(Path(run_dir))
    run.read_info()  # a clear error if this is not a run directory
    if unmerged := run.groups_not_merged():  # else a result of 0 models, said nowhere why
        raise ConfigError(f"harness.load_run: nothing to load at the top of this run yet: {unmerged}")
    return load_result(run, run.read_config())


def nightly(config: ExperimentConfig | str | Path | dict, results_dir: str | Path | None = None, night: str | None = None):
    """`harness nightly`: tonight's run, recorded and compared; returns a `NightlyResult`
    (`.changes`, `.regressions`, `.exit_code`, `.run_dir`)."""
    from harness.nights.tonight import run_nightly

    code_dir = Path(config).resolve().parent if isinstance(config, (str, Path)) else None
    if not isinstance(config, ExperimentConfig):
        config = load_config(config)
    pool.start(1)
    return run_nightly(config, Path(results_dir) if results_dir else None, night, code_dir)


def history(name_or_dir: str | Path, results_dir: str | Path | None = None, metrics: list[str] | None = None):
    """An experiment's history as a DataFrame: one row per run, one column per model x metric."""
    from harness.nights.tonight import find_history, history_table

    return history_table(find_history(name_or_dir, Path(results_dir) if results_dir else None), metrics)


def compare(run_dirs: list[str | Path]):
    """`harness compare`: the models of one or several runs side by side, a DataFrame (a run not
    finished is compared on each member's last evaluation; `compared_on` says so). Tests nothing."""
    from harness.outputs.compare import compare_runs

    return compare_runs(_run_list(run_dirs, "compare"))


def compare_pairs(run_dirs: list[str | Path], chosen: bool = False, metric: str | None = None):
    """`harness compare --pairs`: every model of one run against every model of the others, paired
    on the images both were scored on, on `metric` (a summary column; default: the runs' ranking
    column); `chosen`: only the model each group chose, with output.compare_by. A `CrossRun`
    (`.pairs` DataFrame, `.rank`: the column compared, `.notes`). ConfigError (exit 2) when the
    runs did not score the same images, or seed differently."""
    from harness.outputs.cross_run import cross_run_pairs

    return cross_run_pairs(_run_list(run_dirs, "compare_pairs"), metric, chosen=chosen)


def _run_list(run_dirs, call: str) -> list[Path]:
    """Run directories as a list: one given as a plain string or path is one run (a string was read
    character by character: "compare: / is given twice"); none at all is named, not a pandas error."""
    runs = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(d) for d in run_dirs]
    if not runs:
        raise ConfigError(f"harness.{call}: no run directories given")
    return runs
