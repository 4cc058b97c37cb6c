"""The runner: eager Python around the compiled step, and the only place that does I/O.

A fresh run and a resumed run are the same code path. The order matters:
  1. process settings (determinism) and placement, before any variable exists;
  2. the run directory and its lock; run.json says `running`;
  3. under the strategy's scope: every member's model, optimizer and flags, and the global step;
  4. restore the newest checkpoint that restores completely (none: start at step 0), then drop
     rows measured after it from losses.csv: that work is redone, and recorded once;
  5. the input pipeline, starting at the restored step (it is a function of the step);
  6. the train loop and the eval function, each traced once, on first call;
  7. the outer loop: train up to the next event; write rows; validate at epoch ends; checkpoint
     when due; on SIGTERM/SIGINT, checkpoint and stop with exit code 75;
  8. the last checkpoint, the per-model probe, exports, the summary table, run.json `completed`.
"""

from __future__ import annotations

import errno
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from . import checkpoints as ckpt
from . import rundir as rd
from .backend import import_tf
from .config import ExperimentConfig, validate_config
from .data import build_datasets
from .errors import ConfigError, DataError, HarnessError, Interrupted, ResourceError
from .export import BestTracker, export_model
from .lock import FolderLock
from .members import Member, build_members, preserved_state
from .probe import probe_input_wait_share, probe_ms_per_step
from .sources import data_facts
from .runtime import (
    Placement,
    build_placement,
    configure_determinism,
    configure_devices,
    configure_precision,
    describe_plan,
    device_names,
)
from .step import make_eval_fn, make_train_loop
from .flops import forward_flops
from .outputs import samples_from_models, write_outputs, write_report_page
from .tables import load_losses
from .writers import CsvRowsWriter, MultiWriter, Row, TensorBoardWriter, TerminalWriter, truncate_rows_after

tf = import_tf()


@dataclass(frozen=True)
class RunResult:
    """What a finished run returns to Python callers."""

    run_dir: Path
    config: ExperimentConfig
    summary: pd.DataFrame
    losses: pd.DataFrame
    info: dict[str, Any]
    models: dict[str, Any] = field(default_factory=dict)  # name -> trained tf_keras model (in memory)


# ---------------------------------------------------------------------------------------------
# Entry points


def prepare_process(config: ExperimentConfig) -> Placement:
    """Process-wide settings, in the order TensorFlow needs them: devices before anything
    initialises the runtime, then determinism and precision, then the strategy."""
    configure_devices(config.placement)
    configure_determinism(config.train.deterministic)
    configure_precision(config.placement.precision)
    return build_placement(config)


def run_experiment(config: ExperimentConfig, results_dir: Path | None = None, run: rd.RunDir | None = None) -> RunResult:
    """Train a new run, in `run` if the caller created it already (nightly registers it first)."""
    placement = prepare_process(config)
    config = resolve_data_sizes(config, results_dir)
    if not placement.is_chief:
        # Only the chief writes the run directory; other workers train in lockstep in a scratch one.
        with _scratch_run_dir(config) as scratch:
            return Runner(config, scratch, placement, resuming=False).run()
    run = run or rd.create_run_dir(config, results_dir)
    with FolderLock(run.path):
        return Runner(config, run, placement, resuming=False).run()


RESUME_OVERRIDABLE = ("placement.", "output.progress", "output.probe_steps")


def resume_run(run_dir: Path, overrides: list[str] | None = None) -> RunResult:
    """Continue an interrupted run from its newest valid checkpoint, optionally elsewhere
    (`placement.*` overrides: trained mirrored on GPUs, resumed on a CPU)."""
    run = rd.RunDir(Path(run_dir))
    info = _read_info(run)
    config = _read_resolved_config(run, overrides or [])
    _refuse_changed_config(config, info)
    placement = prepare_process(config)
    if info.get("status") != "completed":
        _refuse_changed_data(config, resolve_data_sizes(config, run.path.parent.parent))
    if not placement.is_chief:
        with _scratch_run_dir(config, copy_from=run) as scratch:
            return Runner(config, scratch, placement, resuming=True).run()
    with FolderLock(run.path):
        info = _read_info(run)  # again, now that no other process can be writing it
        if info.get("status") == "completed":
            print(f"harness: {run.path} is already completed; nothing to resume", file=sys.stderr)
            return _load_result(run, config)
        return Runner(config, run, placement, resuming=True).run()


def resolve_data_sizes(config: ExperimentConfig, results_dir: Path | None = None) -> ExperimentConfig:
    """Real sources: the pre-flight scan (exit 3 naming every bad file), then the config with the
    sizes it found. After prepare_process: a TFDS source reads its files with TensorFlow."""
    from .sources import resolve_data

    cache = Path(results_dir or config.output.results_dir) / config.name / ".data-cache"
    resolved, scan = resolve_data(config, cache)
    if scan is not None and config.output.progress != "none":
        facts = scan.facts
        print(
            f"harness: data: {facts['used']} examples ({scan.train_size} train, {scan.val_size} val) of "
            f"{facts['listed']} listed, {facts['skipped']} skipped, at {scan.image_size[0]}x{scan.image_size[1]} "
            f"({facts['image_size_reason']}); scan {facts['scan_seconds']} s",
            file=sys.stderr,
        )
        for note in facts["notes"]:
            print(f"harness: data: {note}", file=sys.stderr)
    return resolved


def _refuse_changed_data(config: ExperimentConfig, rescanned: ExperimentConfig) -> None:
    if rescanned.data == config.data:
        return
    raise DataError(
        "the data changed since this run started (files added, removed or now bad), so its batches "
        "would differ; start a new run instead. What differs (started -> now):",
        _differences(config.data.model_dump(mode="json"), rescanned.data.model_dump(mode="json"), "data."),
    )


class _scratch_run_dir:
    """A temporary run directory for a non-chief worker (a copy of the real one's checkpoints when
    resuming: the real one must be on a filesystem every worker sees)."""

    def __init__(self, config: ExperimentConfig, copy_from: rd.RunDir | None = None):
        self.config, self.source = config, copy_from

    def __enter__(self) -> rd.RunDir:
        import shutil
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="harness-worker-"))
        if self.source is None:
            run = rd.create_run_dir(self.config, self.folder)
        else:
            run = rd.RunDir(self.folder / "run")
            shutil.copytree(self.source.path, run.path, ignore=shutil.ignore_patterns(".lock", "models"))
        return run

    def __exit__(self, *exc) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _read_info(run: rd.RunDir) -> dict[str, Any]:
    if not run.run_json.is_file():
        raise ConfigError(f"{run.path} is not a run directory (no run.json)")
    try:
        return run.read_run_info()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{run.run_json} cannot be read: {exc}") from None


def _read_resolved_config(run: rd.RunDir, overrides: list[str]) -> ExperimentConfig:
    import yaml

    from .config import apply_override

    try:
        raw = yaml.safe_load(run.config_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{run.config_file} cannot be read: {exc}") from None
    refused = [o for o in overrides if not o.strip().startswith(RESUME_OVERRIDABLE)]
    if refused:
        raise ConfigError(
            "resume continues the same training; only where it runs may change "
            f"({', '.join(RESUME_OVERRIDABLE)}). Not allowed:",
            refused,
        )
    for override in overrides:
        apply_override(raw, override)
    return validate_config(raw, source=str(run.config_file))


def _refuse_changed_config(config: ExperimentConfig, info: dict[str, Any]) -> None:
    if info.get("config_fingerprint") in (None, config.fingerprint()):
        return
    differences = _differences(info.get("config", {}), config.to_dict())
    raise ConfigError(
        "config.yaml changed since this run started, so its checkpoints do not belong to it; "
        "start a new run instead (harness run). What differs (started -> now):",
        differences or ["(the config fingerprint differs)"],
    )


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            if key == "output":
                continue
            out += _differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in _differences(a, b, f"{prefix}{i}.")]
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def _load_result(run: rd.RunDir, config: ExperimentConfig) -> RunResult:
    summary = pd.read_csv(run.summary_csv) if run.summary_csv.exists() else pd.DataFrame()
    return RunResult(run.path, config, summary, load_losses(run.losses_csv), run.read_run_info())


# ---------------------------------------------------------------------------------------------
# Scheduling helpers


def steps_in_next_call(step: int, steps_per_call: int, periods: Iterable[int], total: int) -> int:
    """How many steps the next call runs: up to k, but never past the next multiple of any period
    (epoch end, checkpoint) or the last step: there the runner has something to do."""
    to_event = min((p - step % p for p in periods), default=steps_per_call)
    return max(1, min(steps_per_call, to_event, total - step))


def is_due(step: int, period: int | None) -> bool:
    return bool(period) and step % period == 0


def epoch_of(step: int, steps_per_epoch: int) -> int:
    """The epoch (1-based) that step `step` (1-based, counted after the update) belongs to."""
    return (step - 1) // steps_per_epoch + 1


# ---------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, config: ExperimentConfig, run: rd.RunDir, placement: Placement, resuming: bool):
        self.config = config
        self.run_dir = run
        self.placement = placement
        self.strategy = placement.strategy
        self.resuming = resuming
        self.info = self._starting_info()
        self.model_facts: dict[str, dict[str, Any]] = {}
        self.members: list[Member] = []
        self._stop_signal: int | None = None
        self.timing = _StepTiming()

    def run(self) -> RunResult:
        self.run_dir.write_run_info(self.info)
        if self.placement.is_chief and self.config.output.progress != "none":
            for line in describe_plan(self.placement.plan):
                print(line, file=sys.stderr)
        try:
            with self._graceful_stop():
                self._train()
        except Interrupted:
            raise
        except BaseException as exc:
            self._mark_failed(exc)
            translated = _translate(exc, self.run_dir.path)
            if translated is exc:
                raise
            raise translated from exc
        return self._result()

    # -- the steps of a run ---------------------------------------------------------------------

    def _train(self) -> None:
        config, strategy, run = self.config, self.strategy, self.run_dir
        with strategy.scope():
            members = build_members(config, self.placement.model_devices)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.members = members
        self.model_facts = {
            m.name: {"params": m.params, "status": "ok", "changed_at_step": 0, "diverged_step": None}
            for m in members
        }
        checkpoint = ckpt.make_checkpoint(members, global_step)
        start = self._restore(checkpoint)
        self._read_statuses(members)
        best = BestTracker(run.path / "models", [m.name for m in members], start)
        self._update_info(steps_done=start, models=self._models_info())

        total = config.total_steps
        datasets = build_datasets(config.data, config.seed, start, total)
        spe = datasets.steps_per_epoch
        ckpt_every = config.train.checkpoint_every_steps or spe
        iterator = self.placement.input_iterator(datasets.train)
        train_loop = make_train_loop(members, self.placement, global_step, config.data.batch_size, config.train.steps_per_call)
        evaluate = make_eval_fn(members, config.data.classes)

        writers = [
            CsvRowsWriter(run.losses_csv),
            TerminalWriter(total, [m.name for m in members], config.output.progress, start),
        ]
        if config.output.tensorboard:
            writers.append(self._tensorboard_writer(members))
        writer = MultiWriter(writers)
        timing = self.timing = _StepTiming()
        step = start
        try:
            while step < total:
                k = steps_in_next_call(step, config.train.steps_per_call, (spe, ckpt_every), total)
                began = time.perf_counter()
                outputs = self._call_train_loop(train_loop, iterator, k)
                timing.add(k, time.perf_counter() - began)
                self._read_statuses(members)
                rows = self._train_rows(outputs, step, spe)
                step += k
                if is_due(step, spe) or step == total:
                    rows += self._validate(evaluate, datasets.val, best, step, spe)
                writer.write(rows, step)
                # Read the flag once: a signal arriving after this point is handled next time round,
                # never between deciding to save and deciding to stop.
                stopping = self._stop_signal is not None
                if is_due(step, ckpt_every) or step == total or stopping:
                    ckpt.save(checkpoint, run.checkpoints, step, config.train.keep_checkpoints)
                self._update_info(steps_done=step, models=self._models_info(), timing=timing.as_dict())
                if stopping and step < total:
                    self._stop(step)
        finally:
            writer.close()
        self._finish(members, datasets, best, train_loop, global_step)

    def _tensorboard_writer(self, members) -> TensorBoardWriter:
        """TensorBoard files are derived data: on resume they are rebuilt from losses.csv (already
        cut back to the checkpoint), so redone steps never appear twice in TensorBoard either."""
        import shutil

        folder = self.run_dir.path / "tb"
        if self.resuming:
            shutil.rmtree(folder, ignore_errors=True)
        writer = TensorBoardWriter(folder, {m.name: _hparams(m.spec) for m in members})
        if self.resuming:
            rows = [Row(*r) for r in load_losses(self.run_dir.losses_csv).itertuples(index=False)]
            writer.write(rows, step=0)
        return writer

    def _restore(self, checkpoint) -> int:
        """Step 4 of the order above: restore, and forget what was measured after the checkpoint."""
        restored = ckpt.restore_newest_valid(checkpoint, self.run_dir.checkpoints)
        for reason in restored.skipped:
            print(f"harness: skipped a checkpoint that does not restore completely: {reason}", file=sys.stderr)
        if self.resuming:
            where = f"step {restored.step} ({Path(restored.path).name})" if restored.path else "step 0 (no checkpoint was written yet)"
            print(f"harness: resuming {self.run_dir.path} from {where}", file=sys.stderr)
        dropped = truncate_rows_after(self.run_dir.losses_csv, restored.step)
        self.info.setdefault("resumes", [])
        if self.resuming:
            self.info["resumes"].append(
                {"at": rd.utc_now(), "from_step": restored.step, "rows_redone": dropped, "skipped_checkpoints": restored.skipped}
            )
        return restored.step

    def _finish(self, members, datasets, best: "BestTracker", train_loop, global_step) -> None:
        config = self.config
        self._update_info(trace_count=train_loop.tracing_count())
        steps = config.output.probe_steps
        if steps > 0:
            probe_data = build_datasets(config.data, config.seed, 0, 3 * steps + 1).train
            self.timing.input_wait_share = probe_input_wait_share(train_loop, self.placement, members, global_step, probe_data, steps)
            self._update_info(timing=self.timing.as_dict())
        probe_batch = next(iter(datasets.val))
        ms = probe_ms_per_step(members, self.strategy, *probe_batch, steps=config.output.probe_steps)
        flops: dict[str, int | None] = {}
        for m in members:
            facts = self.model_facts[m.name]
            if m.name in ms:
                facts["ms_per_step"] = round(ms[m.name], 3)
                facts["images_per_s"] = round(1000.0 * int(probe_batch[0].shape[0]) / ms[m.name], 1)
            arch_key = (m.spec.arch, m.spec.backbone, repr(sorted(m.spec.options.items())))
            if arch_key not in flops:  # repeats share an architecture: count it once
                flops[arch_key] = forward_flops(m.model)
            facts["flops_per_example"] = flops[arch_key]
            facts["input_wait_share"] = self.timing.input_wait_share  # one pipeline: the same for all
        if config.output.export:
            for m in members:
                for key, model in m.exported_models().items():
                    export_model(model, self.run_dir.path / "models" / m.name / f"{key}.keras")
        self._update_info(models=self._models_info())
        samples = samples_from_models(config, {m.name: m.predict for m in members})
        summary = write_outputs(self.run_dir, config, self.info, samples)
        warnings = validation_warnings(summary, config)
        for warning in warnings:
            print(f"harness: warning: {warning}", file=sys.stderr)
        self._update_info(status="completed", ended=rd.utc_now(), warnings=warnings)
        if self.placement.is_chief:
            write_report_page(self.run_dir, config, self.info)  # run.json facts now final
            if config.output.mlflow is not None:
                self._log_mlflow()

    def _log_mlflow(self) -> None:
        """After completion: a failure here costs the MLflow copy, never the run's own results."""
        from .mlflow_log import log_run

        try:
            record = log_run(self.run_dir, self.config, self.info)
        except ConfigError:
            raise
        except Exception as exc:  # MLflow raises its own and its backends' errors
            record = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            print(f"harness: warning: MLflow logging failed, the run's results are complete: {record['error']}", file=sys.stderr)
        self._update_info(mlflow=record)

    def _call_train_loop(self, train_loop, iterator, k: int):
        try:
            outputs = train_loop(iterator, k)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError) as exc:
            if any(m.spec.jit_compile for m in self.members):
                raise _explain_jit_failure(self.members, exc) from None
            raise
        # The one host sync of the call: every step's metrics come back together.
        return tf.nest.map_structure(lambda t: t.numpy(), outputs)

    def _train_rows(self, outputs, step: int, steps_per_epoch: int) -> list[Row]:
        rows = []
        for name, metrics in outputs.items():
            diverged_at = self.model_facts[name]["diverged_step"]
            for metric, values in metrics.items():
                for i, value in enumerate(values):
                    s = step + i + 1
                    if diverged_at is not None and s > diverged_at:
                        break  # a diverged model is frozen: its later losses describe nothing
                    rows.append(Row(s, epoch_of(s, steps_per_epoch), name, "train", metric, float(value)))
        return rows

    def _validate(self, evaluate, val_dataset, best: "BestTracker", step: int, spe: int) -> list[Row]:
        scores = tf.nest.map_structure(lambda t: float(t.numpy()), evaluate(val_dataset))
        epoch = epoch_of(step, spe)
        rows = []
        for member in self.members:
            if self.model_facts[member.name]["status"] != "ok":
                continue
            metrics = scores[member.name]
            rows += [Row(step, epoch, member.name, "val", metric, value) for metric, value in metrics.items()]
            if self.config.output.export:
                best.update(member.name, member.model, step, metrics["loss"])
        return rows

    def _read_statuses(self, members: list[Member]) -> None:
        for m in members:
            facts = self.model_facts[m.name]
            if facts["status"] == "ok" and bool(m.diverged.numpy()):
                at = int(m.diverged_step.numpy())
                facts.update(status="diverged", changed_at_step=at, diverged_step=at)

    # -- stopping on a signal -------------------------------------------------------------------

    def _graceful_stop(self):
        runner = self

        class _Handlers:
            def __enter__(self):
                self.previous = {}
                if threading.current_thread() is not threading.main_thread():
                    return self  # signals can only be handled in the main thread
                for signum in (signal.SIGTERM, signal.SIGINT):
                    self.previous[signum] = signal.signal(signum, self._request)
                return self

            def _request(self, signum, frame):
                # Only a flag: the compiled call in progress finishes, then the loop saves and stops.
                runner._stop_signal = signum

            def __exit__(self, *exc):
                for signum, handler in self.previous.items():
                    signal.signal(signum, handler)

        return _Handlers()

    def _stop(self, step: int) -> None:
        name = signal.Signals(self._stop_signal).name
        self._update_info(status="interrupted", ended=rd.utc_now(), interrupted_by=name)
        raise Interrupted(
            f"stopped by {name} after step {step}/{self.config.total_steps}; a checkpoint was saved. "
            f"Continue with: harness resume {self.run_dir.path}"
        )

    # -- run.json -------------------------------------------------------------------------------

    def _starting_info(self) -> dict[str, Any]:
        if self.resuming:
            info = self.run_dir.read_run_info()
            info.update(status="running", ended=None, error=None, devices=device_names(), placement=self.placement.plan, data=data_facts(self.config.data))
            return info
        return {
            "status": "running",
            "name": self.config.name,
            "run_id": self.run_dir.path.name,
            "started": rd.utc_now(),
            "ended": None,
            "versions": rd.versions(),
            "devices": device_names(),
            "placement": self.placement.plan,
            "config_fingerprint": self.config.fingerprint(),
            "data": data_facts(self.config.data),
            "config": self.config.to_dict(),
            "deterministic": self.config.train.deterministic,
            "total_steps": self.config.total_steps,
            "steps_done": 0,
            "models": {},
        }

    def _models_info(self) -> dict[str, Any]:
        return {
            name: {
                k: facts.get(k)
                for k in ("status", "changed_at_step", "diverged_step", "params", "flops_per_example", "ms_per_step", "images_per_s", "input_wait_share")
            }
            for name, facts in self.model_facts.items()
        }

    def _update_info(self, **changes: Any) -> None:
        self.info.update(changes)
        self.run_dir.write_run_info(self.info)

    def _mark_failed(self, exc: BaseException) -> None:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        message = exc.render() if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
        try:
            self._update_info(status=status, ended=rd.utc_now(), error=message)
        except OSError:
            pass  # the disk may be what failed; the original error matters more

    def _result(self) -> RunResult:
        return RunResult(
            run_dir=self.run_dir.path,
            config=self.config,
            summary=pd.read_csv(self.run_dir.summary_csv),
            losses=load_losses(self.run_dir.losses_csv),
            info=self.info,
            models={m.name: m.model for m in self.members},
        )


def _hparams(spec) -> dict[str, Any]:
    optimizer = spec.optimizer
    return {
        "arch": spec.arch,
        "backbone": spec.backbone or "",
        "loss": spec.loss,
        "optimizer": optimizer.name,
        "learning_rate": optimizer.learning_rate,
    }


def validation_warnings(summary: pd.DataFrame, config: ExperimentConfig) -> list[str]:
    """Point at the usual cause when validation is far worse than training: BatchNorm moving
    averages (momentum 0.99) that have not caught up with the weights in a short run."""
    if config.train.batchnorm_momentum is not None or "val_loss" not in summary:
        return []
    suspicious = summary[summary["val_loss"] > 3 * summary["final_train_loss"]]["model"].tolist()
    if not suspicious:
        return []
    return [
        f"validation loss is over 3x the training loss for {', '.join(suspicious)}. In short runs "
        "this is usually BatchNorm moving averages lagging the weights; try "
        "--set train.batchnorm_momentum=0.9"
    ]


class _StepTiming:
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


def _explain_jit_failure(members: list[Member], exc: Exception) -> ConfigError:
    """Find which members XLA cannot compile, by compiling each fragment alone."""
    failing = []
    for m in members:
        if not m.spec.jit_compile:
            continue
        shape = (1, *m.model.input_shape[1:])
        images = tf.zeros(shape)
        masks = tf.zeros((*shape[:-1], m.model.output_shape[-1]))
        try:
            with preserved_state(m):
                tf.function(m.train_step, jit_compile=True)(images, masks, 1, tf.constant(0, tf.int64))
        except Exception as inner:  # XLA reports unsupported ops under several error classes
            failing.append(f"{m.name} ({m.spec.arch}): {str(inner).splitlines()[0][:200]}")
    detail = failing or [f"XLA error: {str(exc).splitlines()[0][:300]}"]
    return ConfigError(
        "jit_compile: XLA cannot compile these models on this device; set jit_compile: false for "
        "them (models.<name>.jit_compile) or for the run (train.jit_compile):",
        detail,
    )


def _translate(exc: BaseException, where: Path) -> BaseException:
    """Turn resource failures into errors that say which resource, and what to try.

    TensorFlow raises ResourceExhaustedError both for a full disk (writing a checkpoint) and for
    device memory; the message tells them apart."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceError(
            f"disk full while writing {exc.filename or where}: free some space on that disk or "
            "choose another results directory (--results DIR). The last checkpoint is intact: "
            f"harness resume {where} continues once there is room."
        )
    if isinstance(exc, tf.errors.ResourceExhaustedError):
        text = str(exc)
        if "No space left" in text or "disk" in text.lower() or "write" in text.lower():
            return ResourceError(
                f"disk full while writing under {where} ({text.splitlines()[0][:200]}): free some "
                f"space, then harness resume {where}"
            )
        return ResourceError(
            "out of memory while training: lower data.batch_size or data.image_size, train fewer "
            "models at once, or use placement.precision mixed_float16 on a GPU. "
            f"TensorFlow said: {text.splitlines()[0][:200]}"
        )
    return exc
