"""The Runner: eager Python around the compiled step, and the only place a run does I/O.

A fresh run and a resumed run are the same code path. The order matters:
  1. (entry.py) process settings (determinism, devices) and placement, before any variable exists;
     then the data, the run directory and its lock;
  2. run.json says `running`;
  3. under the strategy's scope: every member's model, optimizer and flags, and the global step;
  4. restore the newest checkpoint that restores completely (none: start at step 0), then drop
     rows measured after it from losses.csv: that work is redone, and recorded once;
  5. the input pipeline, starting at the restored step (it is a function of the step);
  6. the train loop and the eval function, each traced once, on first call;
  7. the controller's loop: train up to the next event; write rows; validate at epoch ends;
     checkpoint when due; on SIGTERM/SIGINT, checkpoint and stop with exit code 75;
  8. the end-of-run actions (actions.END_OF_RUN): probes, FLOPs, exports, tables, `completed`,
     report, MLflow.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any


from harness.config.metrics import column, is_per_class
from harness.config.schema import ExperimentConfig
from harness.core.backend import import_tf
from harness.core.placement import Placement, describe_plan, device_names
from harness.data.pipeline import build_datasets
from harness.data.resolve import data_facts
from harness.errors import HarnessError, Interrupted
from harness.members.registry import build_members
from harness.outputs.tables import load_losses, load_summary
from harness.outputs.writers import CsvRowsWriter, MultiWriter, Row, TensorBoardWriter, TerminalWriter, ValScoresWriter, truncate_rows_after
from harness.training import checkpoints as ckpt
from harness import rundir as rd
from harness.training.actions import END_OF_RUN, PHASES, FinishedRun
from harness.training.compiled import CompiledMembers
from harness.training.controller import Controller, Schedule, StopFlag
from harness.training.early_stopping import from_rows as early_stopping_from_rows
from harness.training.export import BestTracker
from harness.training.failures import explain_jit_failure, raise_injected_oom, translate
from harness.training.race import make_race
from harness.training.records import MemberRecord, RunResult, StepTiming, models_info

tf = import_tf()


class Runner:
    def __init__(self, config: ExperimentConfig, run: rd.RunDir, placement: Placement, scan, resuming: bool, end_of_run=END_OF_RUN):
        self.config = config
        self.end_of_run = end_of_run
        self.run_dir = run
        self.placement = placement
        self.scan = scan
        self.resuming = resuming
        self.info = self._starting_info()
        self.records: dict[str, MemberRecord] = {}
        self.members: list = []
        self.stop = StopFlag()
        self.timing = StepTiming()
        self.validated = False
        self.race = None

    def run(self) -> RunResult:
        try:
            self._start()
            with self.stop:
                self._train()
        except Interrupted:
            raise
        except BaseException as exc:
            recorded = self._mark_failed(exc)
            translated = translate(exc, self.run_dir.path)
            if isinstance(translated, HarnessError) and not recorded:
                translated.problems.append(
                    f"{self.run_dir.run_json} could not be updated, so it may still say status: running; "
                    f"no process holds the run, and harness resume {self.run_dir.path} continues it"
                )
            if translated is exc:
                raise
            raise translated from exc
        return self._result()

    def _start(self) -> None:
        """Step 2: run.json says `running`. A new run that cannot write even that leaves nothing."""
        try:
            self.run_dir.write_run_info(self.info)
        except OSError:
            if not self.resuming:
                shutil.rmtree(self.run_dir.path, ignore_errors=True)
            raise
        if self.resuming and self.previous_status == "running":
            print(
                f"harness: {self.run_dir.run_json} said running, but no process held the run: it was killed "
                "(or stopped by a full disk) without updating it",
                file=sys.stderr,
            )
        if self.placement.is_chief and self.config.output.progress != "none":
            for line in describe_plan(self.placement.plan):
                print(line, file=sys.stderr)

    def _train(self) -> None:
        config, run = self.config, self.run_dir
        self._phase(f"building {len(config.member_specs())} member(s)")
        with self.placement.strategy.scope():  # 3.
            members = build_members(config, self.placement.model_devices)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.members = members
        self.records = {m.name: MemberRecord(params=m.params) for m in members}
        checkpoint = ckpt.make_checkpoint(members, global_step, self.info["run_token"])
        start = self._restore(checkpoint)  # 4.
        self._keep_ended(start)
        self._read_statuses()
        self.stopper = early_stopping_from_rows(config.train.early_stopping, load_losses(run.losses_csv))
        best = BestTracker(run.path / "models", [m.name for m in members], start, self.stopper.metric if self.stopper else "loss")
        self._update_info(steps_done=start, models=models_info(self.records))

        datasets = build_datasets(config.data, config.training_seeds(), start, config.total_steps, self.scan)  # 5.
        schedule = Schedule(config.total_steps, config.train.steps_per_call, datasets.steps_per_epoch, config.train.checkpoint_every_steps or datasets.steps_per_epoch)
        self.race = make_race(config.train.race, datasets.steps_per_epoch, config.total_steps, self.info, start)
        if self.race:
            self.info["race"] = self.race.as_info()
        iterator = self.placement.input_iterator(datasets.train)
        self.compiled = CompiledMembers(config, self.placement, global_step)
        self.compiled.rebuilds = [r for r in self.info.get("rebuilds", []) if r["step"] <= start]  # later ones are redone
        self.compiled.build(self._training_members())  # 6.
        writer = self._writers(start)
        self.val_scores = ValScoresWriter(run.val_scores_csv, config.data.classes)

        def train(step: int, k: int) -> list[Row]:
            if self.timing.first_call_s is None:
                self._phase("compiling the fused step (its first call traces it; the calls after it only run)")
            began = time.perf_counter()
            outputs = self._call_train_loop(self.compiled.train_loop, iterator, k)
            seconds = time.perf_counter() - began
            if not self.compiled.first_call_of_rebuild(k, seconds):
                self.timing.add(k, seconds)
            self._read_statuses()
            return self._train_rows(outputs, step, schedule)

        controller = Controller(  # 7.
            schedule=schedule,
            train=train,
            evaluate=lambda step: self._validate(datasets.val, best, step, schedule),
            checkpoint=lambda step: self._checkpoint(checkpoint, step),
            writer=writer,
            after_call=lambda step: self._update_info(steps_done=step, models=models_info(self.records), timing=self.timing.as_dict()),
            stop=self.stop,
            all_ended=lambda: all(r.status != "ok" for r in self.records.values()),
        )
        try:
            step = controller.run(start)
        finally:
            writer.close()
            self.val_scores.close()
        if step < config.total_steps and self.stop.signal is not None:
            self._stopped(step)
        if step < config.total_steps:
            self._phase(f"every member has stopped or diverged by step {step} of {config.total_steps}: the run ends here")
        done = FinishedRun(config, run, self.placement, members, datasets, self.scan, self.compiled.train_loop, global_step, self.records, self.timing, self._update_info, self.info, earlier_traces=self.compiled.earlier_traces)
        for action in self.end_of_run:  # 8.
            if action in PHASES and (text := PHASES[action](done)):
                self._phase(text)
            action(done)

    # -- the steps of a run ---------------------------------------------------------------------

    def _writers(self, start: int) -> MultiWriter:
        names = [m.name for m in self.members]
        writers = [CsvRowsWriter(self.run_dir.losses_csv), TerminalWriter(self.config.total_steps, names, self.config.output.progress, start)]
        if self.config.output.tensorboard:
            writers.append(self._tensorboard_writer())
        if self.config.output.mlflow is not None and self.placement.is_chief:
            from harness.outputs.mlflow_log import MlflowWriter

            writers.append(MlflowWriter(self.config, self.info, self.run_dir.path, lambda record: self._update_info(mlflow=record)))
        return MultiWriter(writers)

    def _tensorboard_writer(self) -> TensorBoardWriter:
        """TensorBoard files are derived data: on resume they are rebuilt from losses.csv (already
        cut back to the checkpoint), so redone steps never appear twice in TensorBoard either."""
        folder = self.run_dir.path / "tb"
        if self.resuming:
            shutil.rmtree(folder, ignore_errors=True)
        writer = TensorBoardWriter(folder, {m.name: _hparams(m.spec) for m in self.members})
        if self.resuming:
            rows = [Row(*r) for r in load_losses(self.run_dir.losses_csv).itertuples(index=False)]
            writer.write(rows, step=0)
        return writer

    def _restore(self, checkpoint) -> int:
        """Step 4: restore, and forget what was measured after the checkpoint."""
        folder = self.run_dir.checkpoints
        recorded = self.info.get("checkpoints") if self.resuming else []
        restored = ckpt.restore_newest_valid(checkpoint, folder, recorded)
        for reason in restored.skipped:
            print(f"harness: skipped checkpoint {reason}", file=sys.stderr)
        if restored.note:
            print(f"harness: {restored.note}", file=sys.stderr)
        # The run's own completed saves from here on: none after the restored step survives.
        own = ckpt.list_checkpoint_steps(folder) if recorded is None else recorded
        self.info["checkpoints"] = [s for s in own if 0 < s <= restored.step]
        if self.resuming:
            where = f"step {restored.step} ({Path(restored.path).name})" if restored.path else "step 0 (no checkpoint was written yet)"
            print(f"harness: resuming {self.run_dir.path} from {where}", file=sys.stderr)
        dropped = truncate_rows_after(self.run_dir.losses_csv, restored.step)
        truncate_rows_after(self.run_dir.val_scores_csv, restored.step)
        self.info.setdefault("resumes", [])
        if self.resuming:
            self.info["resumes"].append(
                {"at": rd.utc_now(), "from_step": restored.step, "rows_redone": dropped, "skipped_checkpoints": restored.skipped}
            )
        return restored.step

    def _phase(self, text: str) -> None:
        """Say what the run is doing before anything that takes more than a moment."""
        if self.config.output.progress != "none" and self.placement.is_chief:
            print(f"harness: {text} ...", file=sys.stderr, flush=True)

    def _checkpoint(self, checkpoint, step: int) -> None:
        """Save, record the save as the run's own, then drop the run's own beyond keep_checkpoints
        (in that order: a kill in between leaves an extra file, never a record of a missing one)."""
        folder = self.run_dir.checkpoints
        ckpt.save(checkpoint, folder, step)
        kept, dropped = ckpt.keep_newest(folder, [step, *self.info["checkpoints"]], self.config.train.keep_checkpoints)
        self._update_info(checkpoints=kept)
        ckpt.delete(folder, dropped)

    def _call_train_loop(self, train_loop, iterator, k: int):
        try:
            raise_injected_oom()
            outputs = train_loop(iterator, k)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError) as exc:
            if any(m.spec.jit_compile for m in self.members):
                raise explain_jit_failure(self.members, exc) from None
            raise
        # The one host sync of the call: every step's metrics come back together.
        return tf.nest.map_structure(lambda t: t.numpy(), outputs)

    def _train_rows(self, outputs, step: int, schedule: Schedule) -> list[Row]:
        rows = []
        for name, metrics in outputs.items():
            frozen_at = self.records[name].frozen_at
            for metric, values in metrics.items():
                for i, value in enumerate(values):
                    s = step + i + 1
                    if frozen_at is not None and s > frozen_at:
                        break  # a diverged or stopped member is frozen: its later losses describe nothing
                    rows.append(Row(s, schedule.epoch_of(s), name, "train", metric, float(value)))
        return rows

    def _validate(self, val_dataset, best: BestTracker, step: int, schedule: Schedule) -> list[Row]:
        """Scores over the validation set (rows of losses.csv) and per image (val_scores.csv),
        from what each image contributed: one evaluation, one host sync."""
        if not self.validated:
            self._phase("validating (the first evaluation compiles the eval function)")
            self.validated = True
        per_image = tf.nest.map_structure(lambda t: t.numpy(), self.compiled.evaluate(val_dataset))
        rows, epoch, scores, stopped = [], schedule.epoch_of(step), {}, []
        for member in self.compiled.active:
            if self.records[member.name].status != "ok":
                continue
            mine = per_image[member.name]
            count = len(mine["loss"])
            metrics = member.eval_scores({k: v.sum(axis=0) for k, v in mine.items()}, count)
            rows += [Row(step, epoch, member.name, "val", metric, float(value)) for metric, value in metrics.items() if not is_per_class(metric)]  # per class: val_scores.csv
            self.val_scores.write(step, epoch, member.name, mine, member.eval_scores(mine, 1))
            if self.config.output.export:
                best.update(member.name, member.model, step, metrics)
            scores[member.name] = {column(k): float(v) for k, v in metrics.items()}
            if self.stopper and self.stopper.observe(member.name, float(metrics[self.stopper.metric])):
                self._stop_member(member, step)
                stopped.append(member.name)
        rung = None
        if self.race and self.race.due(step):
            rung = self._race_rung(step, {name: s[self.race.metric] for name, s in scores.items() if self.records[name].status == "ok"})
        left = stopped + (rung["dropped"] if rung else [])
        if left and self._training_members():
            why = "; ".join(([f"race rung {rung['rung']} dropped {', '.join(rung['dropped'])}"] if rung and rung["dropped"] else [])
                            + ([f"early stopping stopped {', '.join(stopped)}"] if stopped else []))
            self._phase(f"rebuilding the fused step without {', '.join(left)}")
            self.compiled.build(self._training_members(), step, why, also_note=rung if rung and rung["dropped"] else None)
            self.info["rebuilds"] = self.compiled.rebuilds
        return rows

    def _training_members(self) -> list:
        """Members still in the fused step: not dropped by a race, not stopped early. (A diverged one
        stays, frozen by its flag: divergence is found inside the step, without a host sync.)"""
        return [m for m in self.members if self.records[m.name].status not in ("dropped", "stopped")]

    def _race_rung(self, step: int, values: dict[str, float]) -> dict:
        """Rank and drop the members below the cut, recorded in run.json at once (before the
        checkpoint at this step: a resumed run never trains a member its run.json calls dropped)."""
        rung = self.race.decide(step, values)
        for name in rung["dropped"]:
            self.records[name].mark_dropped(step)
        self._update_info(models=models_info(self.records), race=self.race.as_info())
        self._phase(f"race rung {rung['rung']} (epoch {rung['epoch']}): {rung['members_after']} of {len(values)} member(s) kept by {self.race.metric}")
        return rung

    def _stop_member(self, member, step: int) -> None:
        """Early stopping: recorded as `stopped` at this step, and frozen (its flag, in every
        checkpoint, says so); the fused step is then rebuilt without it."""
        member.diverged.assign(True)
        member.diverged_step.assign(step)
        self.records[member.name].mark_stopped(step)
        self._update_info(models=models_info(self.records))  # before this step's checkpoint
        self._phase(f"{member.name} stopped at step {step}: {self.stopper.reason()}")

    def _keep_ended(self, start: int) -> None:
        """On resume, members stopped or dropped at or before the restored step stay so (a stopped
        member's flag is in the checkpoint; a dropped one is left out of the rebuilt step); a stop
        or a rung after it is decided again by the redone validations."""
        for name, previous in (self.info.get("models") or {}).items():
            status = previous.get("status")
            if status in ("stopped", "dropped") and previous.get("changed_at_step", start + 1) <= start and name in self.records:
                mark = self.records[name].mark_stopped if status == "stopped" else self.records[name].mark_dropped
                mark(previous["changed_at_step"])

    def _read_statuses(self) -> None:
        for m in self.members:
            record = self.records[m.name]
            if record.status == "ok" and bool(m.diverged.numpy()):
                record.mark_diverged(int(m.diverged_step.numpy()))

    def _stopped(self, step: int) -> None:
        name = self.stop.name
        self._update_info(status="interrupted", ended=rd.utc_now(), interrupted_by=name)
        raise Interrupted(
            f"stopped by {name} after step {step}/{self.config.total_steps}; a checkpoint was saved. "
            f"Continue with: harness resume {self.run_dir.path}"
        )

    # -- run.json -------------------------------------------------------------------------------

    def _starting_info(self) -> dict[str, Any]:
        facts = {"devices": device_names(), "placement": self.placement.plan, "data": data_facts(self.config.data, self.scan)}
        if self.resuming:
            info = self.run_dir.read_run_info()
            self.previous_status = info.get("status")
            info.update(status="running", ended=None, error=None, **facts)
            info.setdefault("run_token", uuid.uuid4().hex)  # run.json from before tokens
            return info
        return {
            "status": "running",
            "name": self.config.name,
            "run_id": self.run_dir.run_id,
            "run_token": uuid.uuid4().hex,  # saved in every checkpoint: which run it belongs to
            "started": rd.utc_now(),
            "ended": None,
            "versions": rd.versions(),
            "devices": facts["devices"],
            "placement": facts["placement"],
            "config_fingerprint": self.config.fingerprint(),
            "data": facts["data"],
            "config": self.config.to_dict(),
            "deterministic": self.config.train.deterministic,
            "total_steps": self.config.total_steps,
            "steps_done": 0,
            "checkpoints": [],  # steps of the run's own completed checkpoints, newest first
            "models": {},
        }

    def _update_info(self, **changes: Any) -> None:
        self.info.update(changes)
        self.run_dir.write_run_info(self.info)

    def _mark_failed(self, exc: BaseException) -> bool:
        """run.json says how the run ended; False if it could not be written (the disk may be what
        failed: the original error matters more)."""
        if not self.run_dir.path.is_dir():
            return True  # a new run removed whole: there is nothing to mark
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        message = exc.render() if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
        try:
            self._update_info(status=status, ended=rd.utc_now(), error=message)
        except OSError:
            return False
        return True

    def _result(self) -> RunResult:
        return RunResult(
            run_dir=self.run_dir.path,
            config=self.config,
            summary=load_summary(self.run_dir.summary_csv),
            losses=load_losses(self.run_dir.losses_csv),
            info=self.info,
            models={m.name: m.model for m in self.members},
        )


def _hparams(spec) -> dict[str, Any]:
    optimizer = spec.optimizer
    return {"arch": spec.arch, "backbone": spec.backbone or "", "loss": spec.loss, "optimizer": optimizer.name, "learning_rate": optimizer.learning_rate}
