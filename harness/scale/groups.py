"""A run of several groups: each group one fused step in a process of its own, all in ONE run
directory, ending in ONE comparison of every member.

Members in different groups still see the very same batches in the same order (the pipeline is
a pure function of the seed and the step) and start from the same weights (a function of the
seed and the member's name), so the comparison stays paired across groups, devices and machines.

The order:
  1. (entry.py) the plan: which models go together; the run directory and its lock;
  2. run.json says `running` and lists the groups; each group's folder gets its config.yaml (the
     run's config with only its models, the common loss pinned to the run's);
  3. the engine runs the groups, one per free device (`local`) or as Ray tasks (`ray`); a group
     started before resumes from its newest checkpoint, a completed one is not run again;
  4. a group that runs out of device memory is split in two and both halves are run (a new
     process each: TensorFlow cannot hand device memory back); a model that does not fit even
     alone is marked `oom` and the others go on;
  5. SIGTERM/SIGINT: every running group checkpoints and stops, then the run is `interrupted`
     (exit 75) and `harness resume` redoes only the groups that did not complete;
  6. merge the completed groups (rows, scores, records, models, TensorBoard), then the run's
     outputs as for a single group: tables, plots, report, `completed`, MLflow.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.config.naming import model_of
from harness.config.recipes import ACCEPTED
from harness.config.schema import ExperimentConfig
from harness.errors import EXIT_INTERRUPTED, EXIT_STOPPED_AT_ONCE, HarnessError, Interrupted
from harness.scale.engines import GroupTask
from harness.scale.merge import group_dir, merge_groups
from harness.scale.packing import split_in_two
from harness.scale.worker import EXIT_OUT_OF_MEMORY
from harness.training.controller import StopFlag
from harness.training.failures import GROUP_PLANNED_MB
from harness.rundir import RunDir, RunRecord, RunStatus, atomic_write_text, utc_now
from harness.rundir.hardware import common_machine

UNFINISHED = ("pending", "running", "interrupted", "failed")


def group_config(config: ExperimentConfig, models: list[str], parallel: bool) -> ExperimentConfig:
    """The run's config with only these models: one fused step in one process. The common loss
    is pinned to the whole run's (it depends on which losses the members train on)."""
    raw = config.to_dict()
    raw["models"] = [m for m in raw["models"] if m["name"] in models]
    raw["placement"].update(grouping="single", engine="local", memory_budget_mb=None, max_members_per_group=None, parallel_groups=None)
    raw["output"].update(compare_loss=config.compare_loss(), val_compare_loss=config.losses_differ(), mlflow=None)
    if parallel and raw["output"]["progress"] in ("auto", "bar"):
        raw["output"]["progress"] = "lines"  # bars of several processes would overwrite each other
    return ExperimentConfig.model_validate(raw, context={ACCEPTED: True})


def new_group_entry(name: str, models: list[str], config: ExperimentConfig, planned_mb: float | None) -> dict[str, Any]:
    members = [s.name for s in config.member_specs() if model_of(s.name) in models]
    return {"name": name, "models": models, "members": members, "status": "pending", "device": None, "attempts": 0,
            "planned_mb": planned_mb, "peak_rss_mb": None, "started": None, "ended": None, "error": None}


@dataclass
class GroupsRun:
    """The driver of a run of several groups (steps 2-6 above)."""

    config: ExperimentConfig
    run: RunDir
    record: RunRecord  # run.json of the whole run (its `groups`)
    engine: Any  # LocalEngine or RayEngine
    memory_of: dict[str, float | None]  # model -> planned MB of its members (for splitting)
    finish: Callable[["GroupsRun"], None]  # step 6 after the merge: the run's outputs
    stopping: bool = False
    stopped_at_once: list[str] = field(default_factory=list)  # groups a second Ctrl-C stopped without a new checkpoint

    def run_all(self) -> None:
        groups = self.record.groups
        for group in groups:
            self._prepare(group)
        self._save()
        queue = deque(g for g in groups if g["status"] in UNFINISHED)
        stop = self._run_queue(queue)
        self._conclude(stop)

    def _prepare(self, group: dict[str, Any]) -> None:
        folder = group_dir(self.run, group["name"])
        if not folder.config_file.exists():
            parallel = getattr(self.engine, "parallel", True)
            atomic_write_text(folder.config_file, group_config(self.config, group["models"], parallel).to_yaml())

    def _run_queue(self, queue: deque) -> StopFlag:
        with StopFlag() as stop:
            try:
                while (queue and not stop.signal) or self.engine.busy:
                    while queue and not stop.signal and self.engine.has_slot():
                        self._start(queue.popleft())
                    for task, code in self.engine.wait(timeout=0.5):
                        queue.extendleft(reversed(self._outcome(task, code)))
                    if stop.signal and not self.stopping:
                        print(f"harness: {stop.name}: asking every running group to checkpoint and stop", file=sys.stderr)
                        self.stopping = True
                        self.engine.interrupt()
            finally:
                self.engine.close()
        return stop

    def _start(self, group: dict[str, Any]) -> None:
        planned = group.get("planned_mb")
        env = {GROUP_PLANNED_MB: str(planned)} if planned else {}
        task = GroupTask(group["name"], group_dir(self.run, group["name"]).path, tuple(group["members"]), env)
        device = self.engine.start(task)
        group.update(status="running", device=device, attempts=group["attempts"] + 1, started=group["started"] or utc_now())
        self._say(f"group {group['name']} ({len(group['members'])} member(s): {', '.join(group['members'])}) started on {device}")
        self._save()

    def _outcome(self, task: GroupTask, code: int) -> list[dict[str, Any]]:
        """Record how a group ended; return the groups to run next (a split group's halves)."""
        group = self._group(task.name)
        group.update(ended=utc_now(), **self._group_facts(task.name))
        if code == 0:
            group["status"] = "completed"
            self._say(f"group {task.name} completed")
        elif code == EXIT_OUT_OF_MEMORY:
            self._save()
            return self._out_of_memory(group)
        elif code == EXIT_INTERRUPTED or (self.stopping and (code < 0 or code == EXIT_STOPPED_AT_ONCE)):
            # (a process the signal reached before it could set up its own stop: killed by it; or one
            # a second Ctrl-C stopped at once, keeping its newest checkpoint)
            group["status"] = "interrupted"
            if code == EXIT_STOPPED_AT_ONCE:
                self.stopped_at_once.append(task.name)
        else:
            group.update(status="failed", exit_code=code, error=group.get("error") or f"its process exited with code {code}")
            self._say(f"group {task.name} failed: {group['error']}")
        self._save()
        return []

    def _out_of_memory(self, group: dict[str, Any]) -> list[dict[str, Any]]:
        if len(group["models"]) == 1:
            group["status"] = "oom"
            self._say(f"warning: {group['models'][0]} does not fit in device memory even alone: marked oom; the others go on")
            self._save()
            return []
        halves = split_in_two(group["models"], self.memory_of)
        names = [f"{group['name']}{suffix}" for suffix in ("a", "b")]
        new = [new_group_entry(n, models, self.config, _sum(self.memory_of, models)) for n, models in zip(names, halves)]
        group.update(status="split", split_into=names)
        self.record.groups += new
        for entry in new:
            self._prepare(entry)
        self._say(f"group {group['name']} ran out of device memory: split into {names[0]} ({', '.join(halves[0])}) and {names[1]} ({', '.join(halves[1])})")
        self._save()
        return new

    def _conclude(self, stop: StopFlag) -> None:
        groups = self.record.groups
        if stop.signal or any(g["status"] == "interrupted" for g in groups):
            self._update(status=RunStatus.INTERRUPTED, ended=utc_now(), interrupted_by=stop.name or "a group's own stop")
            keeps = "keeps its" if len(self.stopped_at_once) == 1 else "keep their"
            kept = (f"{', '.join(self.stopped_at_once)} stopped at once (Ctrl-C again) and {keeps} newest checkpoint, every "
                    "other group that was running saved one" if self.stopped_at_once else "every group that was running saved a checkpoint")
            raise Interrupted(f"stopped by {stop.name or 'a signal'}; {kept}. Continue with: harness resume {self.run.path}")
        failed = [g for g in groups if g["status"] == "failed"]
        if failed:
            self._update(status=RunStatus.FAILED, ended=utc_now(), error=f"{len(failed)} group(s) failed")
            raise GroupsFailed(
                f"{len(failed)} of the run's groups failed; the others are complete and kept. After fixing the cause, "
                f"harness resume {self.run.path} runs only the groups that did not complete:",
                [f"{g['name']} ({', '.join(g['members'])}): {g['error']} (see {group_dir(self.run, g['name']).path})" for g in failed],
                failed[0].get("exit_code", 1),
            )
        # Whose timings these are: the groups' machines (Ray places them), not the driver's.
        machine = common_machine([g.get("hardware") for g in groups if g["status"] == "completed"])
        with self._merging():
            self._update(**merge_groups(self.run, groups), hardware=machine or self.record.hardware)
            self.finish(self)

    def _merging(self) -> StopFlag:
        """The merge and the run's own outputs take seconds and train nothing: a signal then is
        answered and they are finished (Ctrl-C again stops at once, and `resume` merges again).
        Unhandled, a Ctrl-C there printed "harness: interrupted" and left run.json saying running."""
        return StopFlag(notice=f"every group is trained; harness merges them (tables, statistics, plots, the report: seconds), then "
                               f"exits (Ctrl-C again: stop at once; harness resume {self.run.path} then merges them again, training nothing)",
                        at_once=f"stopped at once (exit 130): every group is trained, the merge not written; harness resume "
                                f"{self.run.path} merges them again, training nothing")

    # -- records ----------------------------------------------------------------------------

    def _group(self, name: str) -> dict[str, Any]:
        return next(g for g in self.record.groups if g["name"] == name)

    def _group_facts(self, name: str) -> dict[str, Any]:
        """What the group's own files say: its error, the steps it did, its peak memory."""
        folder = group_dir(self.run, name)
        facts: dict[str, Any] = {}
        try:
            info = json.loads(folder.run_json.read_text(encoding="utf-8"))
            facts.update(steps_done=info.get("steps_done"), error=info.get("error"), hardware=info.get("hardware"))
        except (OSError, ValueError):
            pass
        memory = folder.path / "memory.json"
        if memory.exists():
            facts["peak_rss_mb"] = json.loads(memory.read_text(encoding="utf-8")).get("peak_rss_mb")
        return facts

    def _save(self) -> None:
        self.record.steps_done = steps_every_group_reached(self.record.groups)
        self.run.write_record(self.record)

    def _update(self, **changes: Any) -> None:
        self.record.update(**changes)
        self._save()

    def _say(self, text: str) -> None:
        if self.config.output.progress != "none":
            print(f"harness: {text}", file=sys.stderr, flush=True)


class GroupsFailed(HarnessError):
    """Some groups failed (each named with its reason); the completed ones are kept. Its exit
    code is the first failed group's when that is one of the contract's (bad data, disk full)."""

    def __init__(self, message: str, problems: list[str], exit_code: int):
        super().__init__(message, problems)
        self.exit_code = exit_code if exit_code in (2, 3, 4, 5) else 1


def _sum(memory: dict[str, float | None], models: list[str]) -> float | None:
    values = [memory.get(m) for m in models]
    return None if any(v is None for v in values) else round(sum(values), 1)


def steps_every_group_reached(groups: list[dict[str, Any]]) -> int:
    """The run's `steps_done` (what `harness runs` and the report show): the step every group
    that trains has reached, by each group's own run.json as last read; a group split in two, or
    a model too big alone (`oom`), trains nothing and is not waited for."""
    return min((int(g.get("steps_done") or 0) for g in groups if g["status"] not in ("split", "oom")), default=0)
