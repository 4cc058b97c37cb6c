"""Starting and resuming runs: process settings, the data, the run directory and its lock, and
the checks that refuse to continue a run whose config or data changed. The run itself is the
Runner's (`harness.training.runner`)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any


from harness.config.changes import differences
from harness.config.schema import ExperimentConfig
from harness.core.placement import (Placement, build_placement, configure_determinism, configure_devices, configure_precision,
                                    input_pipeline_warning)
from harness.data.fingerprint import changed_items, moved_items
from harness.errors import ConfigError, DataError
from harness.members.registry import check_code, input_multiple
from harness.members.zoo import weights_digest
from harness.members.trial import blame_traced_failure, trial_build
from harness import rundir as rd
from harness.training import preflight
from harness.training.actions import END_OF_RUN
from harness.training.failures import WORKER_SCRATCH
from harness.rundir import FolderLock
from harness.training.records import RunResult


def prepare_process(config: ExperimentConfig) -> Placement:
    """Process-wide settings, in the order TensorFlow needs them: devices before anything
    initialises the runtime, then determinism and precision, then the strategy."""
    configure_devices(config.placement)
    configure_determinism(config.train.deterministic)
    if warning := input_pipeline_warning(config.train.deterministic):
        print(f"harness: warning: {warning}", file=sys.stderr)  # again among the run's warnings at its end
    configure_precision(config.placement.precision)
    return build_placement(config)


def run_experiment(config: ExperimentConfig, results_dir: Path | None = None, run: rd.RunDir | None = None, scan=None, end_of_run=END_OF_RUN) -> RunResult:
    """Train a new run, in `run` if the caller created it already (nightly registers it first;
    it passes the data it resolved as `scan`, with `config` already resolved; a group's process
    passes its folder and the group's shorter end of run)."""
    from harness.training.runner import Runner

    check_code(config)  # the factories and kinds the config names, before anything is written
    placement = prepare_process(config)
    if scan is None:
        config, scan = resolve_data_sizes(config, results_dir, say=end_of_run is END_OF_RUN)
    if not placement.is_chief:
        # Only the chief writes the run directory; other workers train in lockstep in a scratch one.
        with _scratch_run_dir(config) as scratch:
            return Runner(config, scratch, placement, scan, resuming=False).run()
    if run is not None:
        with FolderLock(run.path):
            record_data_fingerprint(run, scan)
            return Runner(config, run, placement, scan, resuming=False, end_of_run=end_of_run).run()
    trial_build(config)  # the user's factories and kinds, once each, before anything is written
    run = rd.create_run_dir(config, results_dir)
    try:
        with FolderLock(run.path):
            record_data_fingerprint(run, scan)
            return Runner(config, run, placement, scan, resuming=False, end_of_run=end_of_run).run()
    except Exception as exc:
        blamed = _blamed_before_any_step(exc, config, run)
        if blamed is None:
            raise
        raise blamed from exc


def _blamed_before_any_step(exc: Exception, config: ExperimentConfig, run: rd.RunDir) -> Exception | None:
    """A member's own code failing before its first step (a kind's train_step, a model's call,
    met while the fused step is traced): the user's error naming the member, and the run folder
    this command made, which holds nothing trained yet, removed, as the trial's failures leave none."""
    try:
        trained = run.read_record().steps_done > 0
    except Exception:  # an unreadable record: keep the folder, the error says what happened
        return None
    blamed = None if trained else blame_traced_failure(exc, config)
    if blamed is not None:
        rd.discard_new_run_dir(run)
    return blamed


def resume_run(run_dir: Path, overrides: list[str] | None = None, end_of_run=END_OF_RUN, accept_changed_data: bool = False) -> RunResult:
    """Continue an interrupted run from its newest valid checkpoint, optionally elsewhere
    (`placement.*` overrides: trained mirrored on GPUs, resumed on a CPU). Like `run`, this runs
    the code the run's config names (model factories, member kinds)."""
    from harness.training.runner import Runner

    run = rd.RunDir(Path(run_dir))
    record = run.read_record()
    config = run.read_config(overrides or [])
    refuse_changed_config(config, record)
    check_code(config)
    placement = prepare_process(config)
    if not placement.is_chief:
        _, scan = resolve_data_sizes(config, run.results_dir)
        with _scratch_run_dir(config, copy_from=run) as scratch:
            return Runner(config, scratch, placement, scan, resuming=True).run()
    with FolderLock(run.path):
        record = run.read_record()  # again, now that no other process can be writing it
        if record.status == rd.RunStatus.COMPLETED:
            return nothing_to_resume(run, config)
        rescanned, scan = resolve_data_sizes(config, run.results_dir, say=end_of_run is END_OF_RUN)
        refuse_changed_data(config, rescanned)
        accept = accept_changed_data or os.environ.get(ACCEPT_CHANGED_DATA) == "1"
        refuse_changed_content(run, scan, accept)
        refuse_changed_weights(run, record, accept)
        return Runner(config, run, placement, scan, resuming=True, end_of_run=end_of_run).run()


def resolve_data_sizes(config: ExperimentConfig, results_dir: Path | None = None, say: bool = True):
    """Real sources: the pre-flight scan (exit 3 naming every bad file), with every network's size
    rule, users' factories' included (this imports them); returns the resolved config and the
    scan. After prepare_process: a TFDS source reads its files with TensorFlow. `say`: False in a
    group's process (a shorter end of run than END_OF_RUN), whose driver said what the scan found."""
    multiple = input_multiple(config) if config.data.source != "synthetic" else 1
    return preflight.resolve_data_sizes(config, results_dir, multiple, say)


def refuse_changed_data(config: ExperimentConfig, rescanned: ExperimentConfig, so: str = "its batches would differ; start a new run instead") -> None:
    """`so`: what the change means for the command refusing it."""
    if rescanned.data == config.data:
        return
    raise DataError(
        f"the data changed since this run started (files added, removed, now bad or moved to another split), so {so}. "
        "What differs (started -> now):",
        differences(config.data.model_dump(mode="json"), rescanned.data.model_dump(mode="json"), "data."),
    )


ACCEPT_CHANGED_DATA = "HARNESS_ACCEPT_CHANGED_DATA"  # `resume --accept-changed-data`, passed on to group processes
LISTED = 20  # changed files named in the message; the rest counted


def record_data_fingerprint(run: rd.RunDir, scan, **more: Any) -> None:
    """data_fingerprint.json: each example's content fingerprint and split as the run starts on it."""
    if scan is not None and scan.fingerprints:
        rd.atomic_write_text(run.data_fingerprint_json, json.dumps({"items": scan.fingerprints, "splits": scan.splits, **more}, sort_keys=True) + "\n")


def recorded_fingerprint(run: rd.RunDir) -> dict | None:
    """data_fingerprint.json: what the run started on, or what a resume accepted since (then with
    `accepted_change_at`); None for a run from before fingerprints."""
    try:
        recorded = json.loads(run.data_fingerprint_json.read_text(encoding="utf-8"))
        if not isinstance(recorded.get("items"), dict):
            raise ValueError("it holds no 'items' mapping")
        return recorded
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError) as exc:
        raise DataError(f"{run.data_fingerprint_json} cannot be read ({exc}); it is what the data is checked against "
                        "(resume --accept-changed-data trains on the data as it is now)") from None


def changed_data_files(recorded: dict | None, scan) -> list[str]:
    """The data files whose content or split differ from the recorded fingerprint's, each as
    "<kind>: <name>"; none without one."""
    if recorded is None:
        return []
    splits_before = recorded.get("splits") or {}  # splits: not in a run from before them
    diff = changed_items(recorded["items"], scan.fingerprints if scan is not None else {})
    found = [f"{kind}: {name}" for kind, names in diff.items() for name in names]
    return found + [f"moved: {said}" for said in moved_items(splits_before, scan.splits if scan is not None and splits_before else {})]


def changed_files_error(found: list[str], so: str) -> DataError:
    """Exit 3 naming the changed files (the first LISTED, the rest counted); `so`: what the change
    means for the command refusing it, and what to do."""
    more = [f"... and {len(found) - LISTED} more"] if len(found) > LISTED else []
    return DataError(f"{len(found)} data file(s) changed since this run started (their content, or the split they are in), so {so}. "
                     "What changed:", found[:LISTED] + more)


def refuse_changed_content(run: rd.RunDir, scan, accept: bool) -> None:
    """Exit 3 naming the files whose content changed since the run started (edited in place under
    the same names: the counts and sizes the config check sees are the same); with `accept`, go on
    on the new content and record that. A run from before fingerprints is not checked."""
    found = changed_data_files(recorded_fingerprint(run), scan)
    if not found:
        return
    if accept:
        print(f"harness: warning: resuming on changed data as asked ({len(found)} file(s) differ from when the run started); "
              "the resumed steps are not what an uninterrupted run would have trained", file=sys.stderr)
        record_data_fingerprint(run, scan, accepted_change_at=rd.utc_now(), accepted=found[:LISTED])
        return
    raise changed_files_error(found, "resuming would train its remaining steps on other examples than an uninterrupted run. Start a "
                                     f"new run, or resume on the new data anyway with: harness resume {run.path} --accept-changed-data")


def refuse_changed_weights(run: rd.RunDir, record: rd.RunRecord, accept: bool) -> None:
    """A run with no completed checkpoint starts again from step 0, from its models' weights files:
    one whose content changed since the run started would start it from other weights (exit 3
    naming it; with `accept`, go on and record the new content). After a checkpoint the weights
    come from it, and the files no longer matter."""
    if record.checkpoints:
        return
    # (A file that is gone was refused with the config: "weights file ... does not exist".)
    now = {path: weights_digest(Path(path)) for path in record.weights_files}
    changed = [path for path, digest in record.weights_files.items() if now[path] != digest]
    if not changed:
        return
    if accept:
        print(f"harness: warning: resuming from step 0 on changed weights file(s) as asked: {', '.join(changed)}", file=sys.stderr)
        record.weights_files.update(now)
        run.write_record(record)
        return
    raise DataError(
        f"{len(changed)} weights file(s) changed since this run started, and it has no checkpoint yet: resuming would start "
        f"it again from other weights than it started from. Start a new run, or resume from the new weights anyway with: "
        f"harness resume {run.path} --accept-changed-data. Changed:", changed)


def refuse_changed_config(config: ExperimentConfig, info: dict[str, Any]) -> None:
    if config.trains_as_recorded(info.get("config_fingerprint"), info.get("config")):
        return
    raise ConfigError(
        "config.yaml changed since this run started, so its checkpoints do not belong to it; "
        "start a new run instead (harness run). What differs (started -> now):",
        config.changed_since(info.get("config") or {}) or ["(the config fingerprint differs)"],
    )


def nothing_to_resume(run: rd.RunDir, config: ExperimentConfig) -> RunResult:
    print(f"harness: {run.path} is already completed; nothing to resume", file=sys.stderr)
    return load_result(run, config)


def completed_result(run: rd.RunDir, overrides: list[str]) -> RunResult:
    """`harness resume` of a completed run, without its code: nothing is trained, so a factory no
    longer on the path (a script's mymodels.py, run from another folder) is not asked for."""
    record = run.read_record()
    config = run.read_config(overrides)
    refuse_changed_config(config, record)
    return nothing_to_resume(run, config)


def load_result(run: rd.RunDir, config: ExperimentConfig) -> RunResult:
    from harness.training.records import ExportedModels

    return RunResult.read(run, config, run.read_run_info(), ExportedModels(run.path))


class _scratch_run_dir:
    """A temporary run directory for a non-chief worker (a copy of the real one's checkpoints when
    resuming: the real one must be on a filesystem every worker sees)."""

    def __init__(self, config: ExperimentConfig, copy_from: rd.RunDir | None = None):
        self.config, self.source = config, copy_from

    def __enter__(self) -> rd.RunDir:
        sweep_dead_scratch(Path(tempfile.gettempdir()))
        self.folder = Path(tempfile.mkdtemp(prefix=WORKER_SCRATCH))
        self.lock = FolderLock(self.folder, purpose="worker's scratch run").acquire()  # held for the worker's life
        if self.source is None:
            return rd.create_run_dir(self.config, self.folder)
        run = rd.RunDir(self.folder / "run")
        # The chief starts resuming the same folder meanwhile: its atomic writes' temp files and a
        # killed save's leftovers may be listed here and gone a moment later (which failed a
        # worker's resume with shutil.Error). Neither is anything a worker restores from.
        shutil.copytree(self.source.path, run.path, ignore=shutil.ignore_patterns(".lock", "models", "*.tmp", "*_temp*"),
                        copy_function=_copy_unless_gone)
        return run

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)  # still locked: no sweep takes it meanwhile
        self.lock.release()


def sweep_dead_scratch(root: Path) -> None:
    """A worker killed outright (SIGKILL, or `harness workers` killing a peer stuck in a collective
    after another failed) never reached `__exit__`, and its scratch folder stayed in the temp folder
    for good, a resume's copy of the run's checkpoints in it. Each scratch folder is locked by its
    worker for its life (the kernel lets go when the process dies): one whose lock file names a
    holder that no longer holds it is removed. An empty lock file is one being taken: kept."""
    for folder in root.glob(f"{WORKER_SCRATCH}*"):
        try:
            recorded = (folder / ".lock").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # no lock (from before it), or another user's folder
            continue
        if recorded.strip() and rd.holder_of(folder) is None:
            shutil.rmtree(folder, ignore_errors=True)


def _copy_unless_gone(source: str, target: str) -> str:
    try:
        return shutil.copy2(source, target)
    except FileNotFoundError:  # removed by the chief since it was listed
        return target
