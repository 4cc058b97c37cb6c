"""What follows an evaluation, as a list of small actions applied in order to its outcome (as the
end of a run is END_OF_RUN): keep each member's best weights, stop members early, cut a race rung.

An action may send members out of the fused step (a `Departure`); the Runner has them leave it
once, after all actions, if any did (by their switches, or by a rebuild: training/compiled.py). The order matters: early stopping before the race, so a
member stopped at this evaluation is not also ranked by the rung.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.config.metrics import metric_of
from harness.errors import ConfigError
from harness.outputs.tables import load_losses
from harness.rundir import MemberRecord, MemberStatus, RunDir
from harness.training.early_stopping import EarlyStopping
from harness.training.early_stopping import from_rows as early_stopping_from_rows
from harness.training.export import BestTracker
from harness.training.race import Race, make_race


@dataclass(frozen=True)
class Evaluation:
    step: int
    scores: dict[str, dict[str, float]]  # member -> metric (iou, f1, loss, ...) -> value over the validation set


@dataclass(frozen=True)
class Departure:
    members: list[str]
    why: str  # for run.json `rebuilds` and the terminal
    note: dict | None = None  # a record completed with the rebuilt step's first call (a race rung)


EvalAction = Callable[[Evaluation], "Departure | None"]  # with a `phase`: its name in run.json `phases`


class SaveBest:
    """models/<name>/best.keras: each member's weights at its best score so far, written with the
    run's next checkpoint (`BestTracker`)."""

    phase = "best_weights"  # run.json `phases`: with the flush, a whole model file per improved member

    def __init__(self, tracker: BestTracker, models: dict[str, object], checkpoint_due: Callable[[int], bool]):
        self.tracker, self.models, self.checkpoint_due = tracker, models, checkpoint_due

    def __call__(self, evaluation: Evaluation) -> None:
        follows = self.checkpoint_due(evaluation.step)
        for name, scores in evaluation.scores.items():
            self.tracker.update(name, self.models[name], evaluation.step, scores, checkpoint_follows=follows)

    def flush(self, step: int) -> None:
        self.tracker.flush(self.models, step)


class StopEarly:
    """train.early_stopping: a member whose score stopped improving is frozen (its flag, in every
    checkpoint, says so) and recorded as `stopped` at this step, before this step's checkpoint."""

    phase = "eval_actions"  # run.json `phases`

    def __init__(self, stopper: EarlyStopping, members: dict[str, object], records: dict[str, MemberRecord], save_records, say):
        self.stopper, self.members, self.records, self.save_records, self.say = stopper, members, records, save_records, say

    def __call__(self, evaluation: Evaluation) -> Departure | None:
        stopped = []
        for name, scores in evaluation.scores.items():
            if self.stopper.observe(name, watched_score(scores, self.stopper.metric, name, "train.early_stopping")):
                member = self.members[name]
                member.diverged.assign(True)
                member.diverged_step.assign(evaluation.step)
                self.records[name].mark_stopped(evaluation.step)
                self.save_records()
                self.say(f"{name} stopped at step {evaluation.step}: {self.stopper.reason()}")
                stopped.append(name)
        return Departure(stopped, f"early stopping stopped {', '.join(stopped)}") if stopped else None


class RaceRung:
    """train.race: at a rung, rank the members still training and drop those below the cut,
    recorded in run.json at once (before the checkpoint at this step: a resumed run never trains a
    member its run.json calls dropped)."""

    phase = "eval_actions"  # run.json `phases`

    def __init__(self, race: Race, records: dict[str, MemberRecord], save_race, say):
        self.race, self.records, self.save_race, self.say = race, records, save_race, say

    def __call__(self, evaluation: Evaluation) -> Departure | None:
        if not self.race.due(evaluation.step):
            return None
        metric = metric_of(self.race.metric)
        values = {n: watched_score(s, metric, n, "train.race") for n, s in evaluation.scores.items() if self.records[n].status == MemberStatus.OK}
        rung = self.race.decide(evaluation.step, values)
        for name in rung["dropped"]:
            self.records[name].mark_dropped(evaluation.step)
        self.save_race(self.race.as_info())
        self.say(rung_said(rung, len(values), self.race.metric))
        if not rung["dropped"]:
            return None
        return Departure(list(rung["dropped"]), f"race rung {rung['rung']} dropped {', '.join(rung['dropped'])}", note=rung)


def rung_said(rung: dict, members: int, metric: str) -> str:
    """What a rung decided, in models (a race keeps or drops a model's seeds together, by their
    mean), with the members they stand for when a model has several seeds."""
    kept, models = sum(row["kept"] for row in rung["ranking"]), len(rung["ranking"])
    seeds = f" ({rung['members_after']} of {members} members: each model's seeds go together, ranked by their mean)" if members > models else ""
    return f"race rung {rung['rung']} (epoch {rung['epoch']}): {kept} of {models} model(s) kept by {metric}{seeds}"


def watched_score(scores: dict, metric: str, member: str, what: str) -> float:
    """A member's score `what` watches; a kind whose eval_scores lacks it (its val_metrics said
    otherwise) is named, not a KeyError."""
    if metric not in scores:
        raise ConfigError(f"{what} watches {metric}, and {member}'s validation gave only {', '.join(scores)}: "
                          "choose a metric every member reports (val_loss), or declare the kind's val_metrics")
    return float(scores[metric])


def make_eval_actions(config, run: RunDir, roster, book, start: int, schedule, say) -> list[EvalAction]:
    """What follows each evaluation of this run, in order; early stopping's history and the race's
    rungs so far are read back from what a resumed run already wrote."""
    members, record = roster.members, book.record
    stopper = early_stopping_from_rows(config.train.early_stopping, load_losses(run.losses_csv))
    actions: list[EvalAction] = []
    if config.output.export:
        tracker = BestTracker(run.path / "models", [m.name for m in members], start, stopper.metric if stopper else "loss")
        actions.append(SaveBest(tracker, {m.name: m.model for m in members}, schedule.checkpoint_due))
    if stopper:
        actions.append(StopEarly(stopper, {m.name: m for m in members}, roster.records, book.write, say))
    if race := make_race(config.train.race, schedule.steps_per_epoch, config.total_steps, record, start):
        record.race = race.as_info()
        actions.append(RaceRung(race, roster.records, lambda info: book.update(race=info), say))
    return actions
