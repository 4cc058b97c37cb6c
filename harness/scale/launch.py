"""Starting and resuming a run of any size: one fused step in this process when the members fit
one group (the common case), else the groups of `harness.scale.groups`. The API, the CLI and
`harness nightly` start and resume runs only through here."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

from harness import rundir as rd
from harness.config.schema import ExperimentConfig
from harness.data.resolve import data_facts
from harness.errors import ConfigError
from harness.members.registry import check_code
from harness.members.trial import trial_build
from harness.outputs import pool
from harness.outputs.derived import samples_from_exports, write_outputs
from harness.rundir import FolderLock
from harness.scale.engines import LocalEngine, RayEngine
from harness.scale.groups import GroupsRun, new_group_entry
from harness.scale.plan import Plan, find_devices, make_plan, save_plan, uses_groups
from harness.training.actions import end_of_run_warnings, log_mlflow, mark_completed, write_final_report
from harness.training.entry import ACCEPT_CHANGED_DATA, load_result, nothing_to_resume, refuse_changed_config, resolve_data_sizes, resume_run, run_experiment
from harness.training.records import RunResult
from harness.training.run_book import RunBook


def start_run(config: ExperimentConfig, results_dir: Path | None = None, run: rd.RunDir | None = None, scan=None) -> RunResult:
    """Train a new run (in `run` if the caller made it already, as nightly does)."""
    if not uses_groups(config):
        return run_experiment(config, results_dir, run, scan)
    check_code(config)
    _driver_takes_no_gpu_memory(config.placement.strategy == "split_gpu")
    if scan is None:
        config, scan = resolve_data_sizes(config, results_dir)  # bad data: exit 3 before anything is written
    results = Path(results_dir or config.output.results_dir)
    plan = make_plan(config, results / ".plan-cache", measure_members=False, say=lambda text: _say(config, text))
    if len(plan.groups) == 1 and not plan.too_big and config.placement.engine == "local":
        return run_experiment(config, results_dir, run, scan)  # everything fits one fused step
    _refuse_race_over_groups(config, plan)
    for line in plan.describe():
        _say(config, f"harness: {line}")
    if run is None:
        trial_build(config)
    engine = make_engine(config)  # a cluster that cannot be joined stops the run before its folder exists
    pool.grow()  # this process waits for the groups, then writes the outputs
    run = run or rd.create_run_dir(config, results_dir)
    with FolderLock(run.path):
        save_plan(plan, run.path / "plan.json")
        record = _starting_record(config, run, plan, scan)
        GroupsRun(config, run, record, engine, plan.memory_of(), finish=finish_groups).run_all()
    return load_result(run, config)


def _refuse_race_over_groups(config: ExperimentConfig, plan: Plan) -> None:
    """A race needs every member in one fused step: groups train in separate processes, one after
    another on a machine with one device, so they never stand at the same rung together; making
    them wait for each other at every rung would idle every device but the slowest group's."""
    if config.train.race is None:
        return
    raise ConfigError(
        f"train.race: the plan splits the members into {len(plan.groups)} groups, and a race runs in one fused step "
        "(groups train in separate processes that do not meet at rungs). Race within one group (placement.grouping: "
        "single, and no memory_budget_mb, max_members_per_group or parallel_groups), or race each group's members "
        "as experiments of their own"
    )


def plan_only(config: ExperimentConfig, results_dir: Path | None = None) -> tuple[Plan, Path]:
    """`harness plan`: measure every model (cached), pack them, write results/<name>/plan.json."""
    results = rd.make_experiment_folder(config, results_dir).parent  # before minutes of measuring
    check_code(config)
    _driver_takes_no_gpu_memory(config.placement.strategy == "split_gpu")
    config, _ = resolve_data_sizes(config, results_dir)
    trial_build(config)  # a model that does not build is the config's error, not a failed probe's traceback
    plan = make_plan(config, results / ".plan-cache", measure_members=True, say=lambda text: _say(config, text))
    path = results / config.name / "plan.json"
    save_plan(plan, path)
    return plan, path


def resume(run_dir: Path, overrides: list[str] | None = None, accept_changed_data: bool = False) -> RunResult:
    """Continue an interrupted run; with groups, only the groups that did not complete.
    `accept_changed_data`: go on although data files changed since the run started (each group's
    process is told through the environment)."""
    run = rd.RunDir(Path(run_dir))
    record = run.read_record()
    if not record.groups:
        return resume_run(run.path, overrides, accept_changed_data=accept_changed_data)
    if accept_changed_data:
        os.environ[ACCEPT_CHANGED_DATA] = "1"
    config = run.read_config(overrides or [])
    refuse_changed_config(config, record)
    check_code(config)
    _driver_takes_no_gpu_memory(config.placement.strategy == "split_gpu")
    with FolderLock(run.path):
        record = run.read_record()  # again, now that no other process can be writing it
        if record.status == rd.RunStatus.COMPLETED:
            return nothing_to_resume(run, config)
        engine = make_engine(config)  # before run.json changes: a cluster that is not up leaves the run as it was
        redo = [g["name"] for g in record.groups if g["status"] in ("pending", "running", "interrupted", "failed")]
        print(f"harness: resuming {run.path}: " + (f"group(s) {', '.join(redo)} to finish, each from its newest checkpoint" if redo else
              "every group is trained; merging them (nothing to train)"), file=sys.stderr)
        record.update(status=rd.RunStatus.RUNNING, ended=None, error=None)
        record.resumes.append({"at": rd.utc_now(), "groups": redo})
        memory = {m["model"]: m.get("peak_mb") for m in _read_plan(run).get("models", [])}
        pool.grow()
        GroupsRun(config, run, record, engine, memory, finish=finish_groups).run_all()
    return load_result(run, config)


def make_engine(config: ExperimentConfig):
    placement = config.placement
    if placement.engine == "ray":
        engine = RayEngine(placement.ray.address, placement.ray.max_retries, placement.ray.cpus_per_group)
        engine.parallel = True
        return engine
    slots = list(find_devices(config).slots)
    engine = LocalEngine(slots)
    engine.parallel = len(slots) > 1
    return engine


def finish_groups(groups_run: GroupsRun) -> None:
    """Step 6 after the merge: the run's own outputs, with the same end-of-run actions as a run of
    one group (tables, `completed`, the report, MLflow)."""
    config, run, record = groups_run.config, groups_run.run, groups_run.record
    _say(config, "harness: merging the groups: tables, statistics, plots and the report ...")
    summary = write_outputs(run, config, record, samples_from_exports(run, config))
    warnings = end_of_run_warnings(config, record, summary)
    oom = [g["models"][0] for g in record.groups if g["status"] == "oom"]
    if oom:
        warnings.append(f"{', '.join(oom)} did not fit in device memory even alone (status oom); the other members completed")
    for warning in warnings:
        print(f"harness: warning: {warning}", file=sys.stderr)
    book = RunBook(run, record)
    done = SimpleNamespace(config=config, run=run, book=book, warnings=warnings, placement=SimpleNamespace(is_chief=True))
    for action in (mark_completed, write_final_report, log_mlflow):
        action(done)


def _starting_record(config: ExperimentConfig, run: rd.RunDir, plan: Plan, scan) -> rd.RunRecord:
    groups = [new_group_entry(g.name, g.members, config, g.memory_mb or None) for g in plan.groups]
    groups += [{**new_group_entry(f"oom-{name}", [name], config, plan.memory_of().get(name)), "status": "oom"} for name in plan.too_big]
    return rd.RunRecord(
        name=config.name, run_id=run.run_id, status=rd.RunStatus.RUNNING, run_token=uuid.uuid4().hex,
        started=rd.utc_now(), versions=rd.versions(),
        devices={"gpus": plan.devices.gpus, "slots": list(plan.devices.slots), "engine": config.placement.engine},
        # The groups' timings come from this machine only when they ran on it: the merge records the groups' own.
        hardware=_this_machine() if config.placement.engine == "local" else None,
        placement={"strategy": "groups", "engine": config.placement.engine, "budget_mb": plan.budget_mb},
        config_fingerprint=config.fingerprint(), data=data_facts(config.data, scan), config=config.to_dict(),
        deterministic=config.train.deterministic, total_steps=config.total_steps, groups=groups, started_in=os.getcwd(),
    )


def _this_machine() -> dict:
    from harness.core.placement import tensorflow_hardware  # TensorFlow, already imported by the plan

    return rd.this_machine(**tensorflow_hardware())


def _read_plan(run: rd.RunDir) -> dict:
    import json

    try:
        return json.loads((run.path / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _driver_takes_no_gpu_memory(config_splits_gpu: bool = False) -> None:
    """The driver of groups reads data and writes tables; the GPUs are its groups'. TensorFlow
    takes most of a GPU's memory on its first operation unless told to grow."""
    from harness.core.backend import import_tf

    tf = import_tf()
    if config_splits_gpu:
        return  # split_gpu makes logical devices of the GPU, which memory growth would forbid
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:
            pass  # already initialised (a notebook): nothing to change now


def _say(config: ExperimentConfig, text: str) -> None:
    if config.output.progress != "none":
        print(text, file=sys.stderr, flush=True)
