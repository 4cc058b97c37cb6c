"""The runner: eager Python around the compiled step, and the only place that does I/O.

The order matters and is the same for every run:
  1. process settings (determinism) and placement, before any variable exists;
  2. the run directory, with config.yaml and run.json (status `running`);
  3. under the strategy's scope: every member's model, optimizer and flags, and the global step;
  4. the input pipeline, starting at the global step;
  5. the train loop and the eval function, each traced once, on first call;
  6. the outer loop: train up to the next event, write rows, validate when an epoch ends;
  7. the per-model probe, the summary table, run.json `completed`.
"""

from __future__ import annotations

import errno
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import rundir as rd
from .backend import import_tf
from .config import ExperimentConfig
from .data import build_datasets
from .errors import ConfigError, HarnessError, ResourceError
from .members import Member, build_members
from .probe import probe_ms_per_step
from .runtime import Placement, build_placement, configure_determinism, device_names
from .step import make_eval_fn, make_train_loop
from .tables import build_summary, load_losses, save_summary
from .writers import CsvRowsWriter, MultiWriter, Row, TerminalWriter

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


def steps_in_next_call(step: int, steps_per_call: int, steps_per_epoch: int, total: int) -> int:
    """How many steps the next call runs: up to k, but never past an epoch end or the last step,
    where the runner has something to do (validate, finish)."""
    to_epoch_end = steps_per_epoch - step % steps_per_epoch
    return max(1, min(steps_per_call, to_epoch_end, total - step))


def epoch_of(step: int, steps_per_epoch: int) -> int:
    """The epoch (1-based) that step `step` (1-based, counted after the update) belongs to."""
    return (step - 1) // steps_per_epoch + 1


def run_experiment(config: ExperimentConfig, results_dir: Path | None = None) -> RunResult:
    configure_determinism(config.train.deterministic)
    placement = build_placement(config)
    run = rd.create_run_dir(config, results_dir)
    return Runner(config, run, placement).run()


class Runner:
    def __init__(self, config: ExperimentConfig, run: rd.RunDir, placement: Placement):
        self.config = config
        self.run_dir = run
        self.placement = placement
        self.strategy = placement.strategy
        self.info = self._initial_info()
        self.model_facts: dict[str, dict[str, Any]] = {}

    # -- public ---------------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.run_dir.write_run_info(self.info)
        try:
            self._train()
        except BaseException as exc:
            self._mark_failed(exc)
            translated = _translate(exc, self.run_dir.path)
            if translated is exc:
                raise
            raise translated from exc
        return self._result()

    # -- the steps of a run ---------------------------------------------------------------------

    def _train(self) -> None:
        config, strategy = self.config, self.strategy
        with strategy.scope():
            members = build_members(config)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.members = members
        self.model_facts = {
            m.name: {"params": m.params, "status": "ok", "changed_at_step": 0, "diverged_step": None}
            for m in members
        }
        self._update_info(models=self._models_info())

        total = config.total_steps
        start = int(global_step.numpy())
        datasets = build_datasets(config.data, config.seed, start, total)
        iterator = iter(strategy.experimental_distribute_dataset(datasets.train))
        train_loop = make_train_loop(members, strategy, global_step, config.data.batch_size)
        evaluate = make_eval_fn(members, config.data.classes)
        self.train_loop = train_loop

        writer = MultiWriter(
            [
                CsvRowsWriter(self.run_dir.losses_csv),
                TerminalWriter(total, [m.name for m in members], config.output.progress, start),
            ]
        )
        spe = datasets.steps_per_epoch
        timing = _StepTiming()
        try:
            step = start
            while step < total:
                k = steps_in_next_call(step, config.train.steps_per_call, spe, total)
                began = time.perf_counter()
                outputs = self._call_train_loop(train_loop, iterator, k)
                timing.add(k, time.perf_counter() - began)
                self._read_statuses(members)
                rows = self._train_rows(outputs, step, spe)
                step += k
                if step % spe == 0 or step == total:
                    rows += self._validate(evaluate, datasets.val, members, step, spe)
                writer.write(rows, step)
                self._update_info(steps_done=step, models=self._models_info(), timing=timing.as_dict())
        finally:
            writer.close()

        self._update_info(trace_count=int(train_loop.experimental_get_tracing_count()))
        probe_batch = next(iter(datasets.val))
        ms = probe_ms_per_step(members, strategy, *probe_batch, steps=config.output.probe_steps)
        for name, value in ms.items():
            self.model_facts[name]["ms_per_step"] = round(value, 3)
        summary = self._write_summary()
        warnings = validation_warnings(summary, self.config)
        for warning in warnings:
            print(f"harness: warning: {warning}", file=sys.stderr)
        self._update_info(status="completed", ended=rd.utc_now(), models=self._models_info(), warnings=warnings)

    def _call_train_loop(self, train_loop, iterator, k: int):
        try:
            outputs = train_loop(iterator, tf.constant(k, tf.int32))
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

    def _validate(self, evaluate, val_dataset, members: list[Member], step: int, spe: int) -> list[Row]:
        scores = tf.nest.map_structure(lambda t: float(t.numpy()), evaluate(val_dataset))
        epoch = epoch_of(step, spe)
        return [
            Row(step, epoch, name, "val", metric, value)
            for name, metrics in scores.items()
            if self.model_facts[name]["status"] == "ok"
            for metric, value in metrics.items()
        ]

    def _read_statuses(self, members: list[Member]) -> None:
        for m in members:
            facts = self.model_facts[m.name]
            if facts["status"] == "ok" and bool(m.diverged.numpy()):
                at = int(m.diverged_step.numpy())
                facts.update(status="diverged", changed_at_step=at, diverged_step=at)

    def _write_summary(self) -> pd.DataFrame:
        summary = build_summary(load_losses(self.run_dir.losses_csv), self.model_facts)
        save_summary(summary, self.run_dir.summary_csv)
        return summary

    # -- run.json -------------------------------------------------------------------------------

    def _initial_info(self) -> dict[str, Any]:
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
            "deterministic": self.config.train.deterministic,
            "total_steps": self.config.total_steps,
            "steps_done": 0,
            "models": {},
        }

    def _models_info(self) -> dict[str, Any]:
        return {
            name: {k: facts.get(k) for k in ("status", "changed_at_step", "params", "ms_per_step")}
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

    def add(self, steps: int, seconds: float) -> None:
        if self.first_call_s is None:
            self.first_call_s = seconds
            return
        self.steps += steps
        self.seconds += seconds

    def as_dict(self) -> dict[str, Any]:
        ms = 1000.0 * self.seconds / self.steps if self.steps else None
        return {"first_call_s": _round(self.first_call_s), "fused_ms_per_step": _round(ms)}


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
            fn = tf.function(m.train_step, jit_compile=True)
            fn.get_concrete_function(images, masks, 1, tf.constant(0, tf.int64))
            snapshot = [v.numpy() for v in m.state_variables()]
            fn(images, masks, 1, tf.constant(0, tf.int64))
            for variable, value in zip(m.state_variables(), snapshot):
                variable.assign(value)
        except Exception as inner:  # XLA reports unsupported ops under several error classes
            failing.append(f"{m.name} ({m.spec.arch}): {str(inner).splitlines()[0][:200]}")
    detail = failing or [f"XLA error: {str(exc).splitlines()[0][:300]}"]
    return ConfigError(
        "jit_compile: XLA cannot compile these models on this device; set jit_compile: false for "
        "them (models.<name>.jit_compile) or for the run (train.jit_compile):",
        detail,
    )


def _translate(exc: BaseException, where: Path) -> BaseException:
    """Turn resource failures into errors that say which resource, and what to try."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceError(
            f"disk full while writing {exc.filename or where}: free some space on that disk or "
            "choose another results directory (--results DIR)"
        )
    if isinstance(exc, tf.errors.ResourceExhaustedError):
        text = str(exc)
        if "No space left" in text or "disk" in text.lower():
            return ResourceError(f"disk full while writing under {where}: free space or use --results DIR")
        return ResourceError(
            "out of memory while training: lower data.batch_size or data.image_size, train fewer "
            "models at once, or use placement.precision mixed_float16 on a GPU. "
            f"TensorFlow said: {text.splitlines()[0][:200]}"
        )
    return exc
