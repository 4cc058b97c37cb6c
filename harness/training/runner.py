"""The Runner: eager Python around the compiled step, and the only place a run does I/O.

A fresh run and a resumed run are the same code path. The order matters:
  1. (entry.py) process settings (determinism, devices) and placement, before any variable exists;
     then the data, the run directory and its lock;
  2. run.json says `running` (run_book.py);
  3. under the strategy's scope: every member's model, optimizer and flags, and the global step;
  4. restore the newest checkpoint that restores completely (none: start at step 0), then drop
     rows measured after it from losses.csv: that work is redone, and recorded once (restore.py);
  5. the input pipeline, starting at the restored step (it is a function of the step);
  6. the train loop and the eval function, each traced once, on first call;
  7. the controller's loop: train up to the next event; write rows; validate at epoch ends and
     apply the eval actions (eval_actions.py: best weights, early stopping, race rungs), rebuilding
     the step when members leave; checkpoint when due; on SIGTERM/SIGINT, checkpoint and stop
     with exit code 75;
  8. the end-of-run actions (actions.END_OF_RUN): probes, FLOPs, exports, tables, `completed`,
     report, MLflow.
"""

from __future__ import annotations

import shutil
import sys
import time

from harness.config.metrics import declare_higher_is_better
from harness.config.naming import members_said
from harness.config.schema import ExperimentConfig
from harness.core.backend import import_tf
from harness.core.placement import Placement, describe_plan, input_pipeline_warning
from harness.data.pipeline import build_datasets, let_go_of
from harness.errors import Interrupted
from harness.members.registry import build_members
from harness.outputs import pool
from harness.outputs.writers import Row, ValScoresWriter
from harness.rundir import RunDir, RunStatus
from harness.training import checkpoints as ckpt
from harness.training.actions import END_OF_RUN, PHASES, FinishedRun, not_yet_written
from harness.training.compiled import CompiledMembers
from harness.training.controller import Controller, Schedule, StopFlag
from harness.training.eval_actions import SaveBest, make_eval_actions
from harness.training.phase_clock import PhaseClock
from harness.training.records import RunResult, StepTiming, TrainedModels
from harness.training.restore import restore_run
from harness.training.row_writers import make_writers
from harness.training.roster import Roster
from harness.training.run_book import RunBook
from harness.training.validation import validate

tf = import_tf()


class Runner:
    def __init__(self, config: ExperimentConfig, run: RunDir, placement: Placement, scan, resuming: bool, end_of_run=END_OF_RUN):
        self.config, self.run_dir, self.placement, self.scan = config, run, placement, scan
        self.resuming, self.end_of_run = resuming, end_of_run
        self.book = RunBook.open(config, run, placement, scan, resuming)
        self.roster = Roster([])
        self.stop = StopFlag(notice=(
            f"the steps in progress finish (up to {config.train.steps_per_call}), then a checkpoint is written and harness "
            f"exits with 75; harness resume {run.resumed_from} continues from it (Ctrl-C again: stop at once)"),
            at_once=(f"stopped at once (exit 130), without a new checkpoint; harness resume {run.resumed_from} continues "
                     "from the newest one already written and trains the steps since it again"))
        self.timing = StepTiming()
        self.clock = PhaseClock()
        self.compiled = CompiledMembers(config, placement, None)
        self.eval_actions: list = []
        self.val_scores: ValScoresWriter | None = None
        self.validated = False

    def run(self) -> RunResult:
        try:
            self._start()
            with self.stop:
                self._train()
        except Interrupted:
            raise
        except BaseException as exc:
            translated = self.book.failed(exc)
            if translated is exc:
                raise
            raise translated from exc
        return RunResult.read(self.run_dir, self.config, self.book.record.to_dict(), TrainedModels({m.name: m.model for m in self.roster.members}))

    def _start(self) -> None:
        """Step 2: run.json says `running`. A new run that cannot write even that leaves nothing."""
        try:
            self.book.write()
        except OSError:
            if not self.resuming:
                shutil.rmtree(self.run_dir.path, ignore_errors=True)
            raise
        if self.placement.is_chief:  # another worker's run.json is the chief's, copied while it starts
            self.book.warn_if_killed_before()
        if self.placement.is_chief and self.config.output.progress != "none":
            for line in describe_plan(self.placement.plan):
                print(line, file=sys.stderr)

    def _train(self) -> None:
        config, run = self.config, self.run_dir
        self._phase(f"building {len(config.member_specs())} member(s)")
        with self.clock.timed("build"):
            members, global_step, checkpoint, start, datasets, schedule = self._build()
        iterator = [self.placement.input_iterator(datasets.train)]  # its only reference: let go of off this thread
        step = self._loop(start, iterator[0], datasets, schedule, checkpoint)
        let_go_of(iterator)
        self.clock.mark("training_done")
        if step < config.total_steps and self.stop.signal is not None:
            self._stopped(step)
        if step < config.total_steps:
            self._phase(f"every member has stopped or diverged by step {step} of {config.total_steps}: the run ends here")
        done = FinishedRun(config, run, self.placement, members, datasets, self.scan, self.compiled, global_step,
                           self.roster.records, self.timing, self.book, warnings=self._run_warnings(schedule))
        self._end_of_run(done, step)

    def _end_of_run(self, done: FinishedRun, step: int) -> None:
        """Step 8: the end-of-run actions in order, each timed; a signal stops the run between two
        of them until it is marked completed, and after that is told what is still written."""
        run = self.run_dir
        # From here a signal stops the run between two end-of-run actions (the quickstart's take a
        # minute), not after them: training is checkpointed, and `resume` redoes the end of the run.
        self.stop.notice = (f"training is done and checkpointed (step {step}); harness stops after the end-of-run action in "
                            f"progress and exits with 75; harness resume {run.path} redoes the end of the run (Ctrl-C again: stop at once)")
        self.stop.at_once = f"stopped at once (exit 130); training is checkpointed (step {step}): harness resume {run.path} redoes the end of the run"
        with self.clock.timed("end: output_processes_ready"):
            pool.settle()  # no output process is loading its libraries while the probes time
        for index, action in enumerate(self.end_of_run):  # 8.
            if self.stop.signal is not None and self.book.record.status != RunStatus.COMPLETED:
                left = not_yet_written(done, self.end_of_run[index:])  # "" in a group stopped just before `completed`
                self._stopped(step, f"before the end of the run: {left} not written" if left else "before it was marked completed")
            if action in PHASES and (text := PHASES[action](done)):
                self._phase(text)
            with self.clock.timed(f"end: {action.__name__}"):
                action(done)
            if self.book.record.status == RunStatus.COMPLETED and (left := not_yet_written(done, self.end_of_run[index + 1:])):
                # A signal no longer stops the run: say what it still writes, not "exits with 75".
                self.stop.notice = f"the run is complete (step {step}); harness finishes writing {left} (Ctrl-C again: stop at once)"
                self.stop.at_once = f"stopped at once (exit 130); the run is complete: harness report {run.path} writes its tables and report.html again"
        self.clock.mark("end_of_run_done")
        self.book.update(phases=self.clock.as_dict())
        self._wait_for_every_worker()

    def _wait_for_every_worker(self) -> None:
        """Last, once every file is final: a peer lost now takes nothing from this run."""
        try:
            self.placement.wait_for_every_worker()
        except tf.errors.OpError as exc:
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            print(f"harness: warning: not every worker reached the end of the run ({first}); this worker's files are complete", file=sys.stderr)

    def _build(self):
        """Steps 3-6: the members, their checkpoint restored, the data from the step it holds, the
        eval actions and the compiled step."""
        config, run, record = self.config, self.run_dir, self.book.record
        with self.placement.strategy.scope():  # 3.
            members = build_members(config, self.placement.model_devices)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.roster = Roster(members)
        declare_higher_is_better(name for m in members for name in m.higher_is_better)
        checkpoint = ckpt.make_checkpoint(members, global_step, record.run_token)
        start = restore_run(checkpoint, run, record, self.resuming)  # 4.
        self.roster.keep_ended(record.models, start)
        self.book.track(self.roster.records)
        self.roster.read_statuses()
        self.book.update(steps_done=start)
        datasets = build_datasets(config.data, config.training_seeds(), start, config.total_steps, self.scan)  # 5.
        schedule = Schedule(config.total_steps, config.train.steps_per_call, datasets.steps_per_epoch, config.train.checkpoint_every_steps or datasets.steps_per_epoch)
        self.eval_actions = make_eval_actions(config, run, self.roster, self.book, start, schedule, self._phase)
        self.compiled = CompiledMembers(config, self.placement, global_step)
        self.compiled.rebuilds = [r for r in record.rebuilds if r["step"] <= start]  # later ones are redone
        self.compiled.build(self.roster.training())  # 6.
        self._switch_off_diverged()  # diverged before the restored step: off from the first call, as they were
        return members, global_step, checkpoint, start, datasets, schedule

    def _loop(self, start: int, iterator, datasets, schedule: Schedule, checkpoint) -> int:
        """Step 7: the controller's loop, with its writers open; the step it ended at."""
        writer = make_writers(self.config, self.run_dir, self.roster.members, start, self.resuming, self.placement.is_chief,
                              self.book.record, lambda record: self.book.update(mlflow=record))
        self.val_scores = ValScoresWriter(self.run_dir.val_scores_csv, self.config.data.classes, self.config.losses_differ())

        def train(step: int, k: int) -> list[Row]:
            first = self.timing.first_call_s is None
            if first:
                self._phase("compiling the fused step (its first call traces it; the calls after it only run)")
            began = time.perf_counter()
            outputs = self.compiled.call(iterator, k)
            seconds = time.perf_counter() - began
            if first and self.placement.is_chief:
                # The other output processes start now. Measured on smoke (5 alternating rounds): 16.6 s
                # median, against 18.1 s when they start before building and 20.6 s with none; the
                # build and the first call, Python on one core, slowed when they loaded beside them.
                pool.grow()
            # A rebuilt step's first call traces too: neither it nor the run's first is steady time.
            retraced = self.compiled.first_call_of_rebuild(k, seconds)
            if not retraced:
                self.timing.add(k, seconds)
            steady = not (first or retraced)
            self.clock.add("steady_steps" if steady else "first_call", seconds)
            self.clock.steady_steps += k if steady else 0
            self.roster.read_statuses()
            self._switch_off_diverged()
            return self.roster.train_rows(outputs, step, schedule)

        controller = Controller(
            schedule=schedule, train=train, writer=writer, stop=self.stop,
            evaluate=lambda step: self._evaluate(datasets.val, step, schedule),
            checkpoint=lambda step: self._checkpoint(checkpoint, step),
            after_call=lambda step: self.book.update(steps_done=step, timing=self.timing.as_dict()),
            all_ended=self.roster.all_ended,
        )
        try:
            return controller.run(start)
        finally:
            writer.close()
            self.val_scores.close()

    # -- evaluation ------------------------------------------------------------------------------

    def _evaluate(self, val_dataset, step: int, schedule: Schedule) -> list[Row]:
        """Scores over the validation set (rows of losses.csv) and per image (val_scores.csv), from
        what each image contributed: one evaluation, one host sync. Then the eval actions; if any
        sent members away, the fused step is rebuilt without them, once."""
        if not self.validated:
            self._phase("validating (the first evaluation compiles the eval function)")
            self.validated = True
        with self.clock.timed("validation" if "first_validation" in self.clock.seconds else "first_validation"):
            rows, evaluation = validate(self.compiled, self.roster, val_dataset, self.val_scores, step, schedule.epoch_of(step))
        departures = []
        for action in self.eval_actions:
            with self.clock.timed(action.phase):
                if departure := action(evaluation):
                    departures.append(departure)
        if departures and self.roster.training():
            leaving = [name for d in departures for name in d.members]
            note = next((d.note for d in departures if d.note is not None), None)
            with self.clock.timed("eval_actions"):
                self.compiled.depart(self.roster.training(), step, "; ".join(d.why for d in departures), also_note=note)
            how = "switched off in the fused step (no new trace)" if self.compiled.switches is not None else "the fused step rebuilt without them"
            self._phase(f"{members_said(leaving)} leave: {how}")
            self.book.record.rebuilds = self.compiled.rebuilds
        return rows

    def _switch_off_diverged(self) -> None:
        if leaving := self.compiled.switch_off_diverged(self.roster.diverged()):
            self._phase(f"{members_said(leaving)} diverged: switched off in the fused step (no new trace), frozen as it was")

    # -- the steps of a run ---------------------------------------------------------------------

    def _phase(self, text: str) -> None:
        """Say what the run is doing before anything that takes more than a moment."""
        if self.config.output.progress != "none" and self.placement.is_chief:
            print(f"harness: {text} ...", file=sys.stderr, flush=True)

    def _run_warnings(self, schedule: Schedule) -> list[str]:
        """What the run's own process says of it: checkpoints that cost much, an input pipeline
        that is not the command line's (`input_pipeline_warning`)."""
        pipeline = input_pipeline_warning(self.config.train.deterministic)
        return self._write_cost_warnings(schedule) + ([pipeline] if pipeline else [])

    def _write_cost_warnings(self, schedule: Schedule) -> list[str]:
        seconds, marks = self.clock.seconds, self.clock.marks
        writes = seconds.get("checkpoints", 0.0) + seconds.get("best_weights", 0.0)
        newest = max(self.book.record.checkpoints, default=None)
        size = ckpt.size_mb(self.run_dir.checkpoints, newest) if newest is not None else 0.0
        note = ckpt.write_cost_warning(writes, marks["training_done"] - marks["runner_started"], schedule.checkpoint_every, self.config.total_steps, size)
        return [note] if note else []

    def _checkpoint(self, checkpoint, step: int) -> None:
        """Save, record the save as the run's own, then drop the run's own beyond keep_checkpoints
        (in that order: a kill in between leaves an extra file, never a record of a missing one)."""
        folder = self.run_dir.checkpoints
        checkpoint.left = {i for i, m in enumerate(self.roster.members)
                           if not self.roster.records[m.name].status.trains or m.name in self.compiled.diverged_off}
        for action in self.eval_actions:  # best.keras first: the files never run ahead of a checkpoint
            if isinstance(action, SaveBest):
                with self.clock.timed(action.phase):
                    action.flush(step)
        with self.clock.timed("checkpoints"):
            ckpt.save(checkpoint, folder, step)
        kept, dropped = ckpt.keep_newest(folder, [step, *self.book.record.checkpoints], self.config.train.keep_checkpoints)
        self.book.update(checkpoints=kept)
        ckpt.delete(folder, dropped)

    def _stopped(self, step: int, what: str = "") -> None:
        self.book.mark_interrupted(self.stop.name)
        raise Interrupted(
            f"stopped by {self.stop.name} after step {step}/{self.config.total_steps}{' ' + what if what else ''}; a checkpoint "
            f"was saved. Continue with: harness resume {self.run_dir.resumed_from}"
        )
