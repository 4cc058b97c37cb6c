"""The compiled functions of a run over the members still training.

A member dropped by a race or stopped early leaves the fused step, so the rest of the run spends
nothing on it. On one replica (a CPU, one GPU, per_model) it leaves by its switch: a boolean
variable the step reads (and, in a run with a race or early stopping, the eval function), its ops
in a branch that no longer runs, no new trace of either (a new trace of the step cost about 10 s
per remaining member per rung; of the eval function, about a second per resnet18 member). Over several replicas (mirrored,
multi_worker) the step and the eval function are rebuilt without it: each build is traced on its
first call, and that call's time is the rebuild's cost, kept out of the steady-state timing as the
run's very first call is. Either way the members that stay compute exactly what they did before
(tested bit for bit).
"""

from __future__ import annotations

from typing import Any, Callable

from harness.core.backend import import_tf
from harness.core.evaluation import make_eval_fn
from harness.core.losses import make_loss
from harness.core.step import make_switches, make_train_loop
from harness.training.failures import explain_jit_failure, raise_injected_oom


class CompiledMembers:
    def __init__(self, config, placement, global_step):
        self.config, self.placement, self.global_step = config, placement, global_step
        self.active: list = []
        self.train_loop = None
        self.evaluate: Callable | None = None  # scores every active member whose switch is on
        self.evaluated: tuple[str, ...] = ()  # the members `evaluate` was built over
        self.eval_switched = False  # whether `evaluate` reads the switches (see `_members_may_leave`)
        self.earlier_traces = 0  # traces of the steps rebuilt away
        self.earlier_eval_traces = 0  # and of their eval functions
        self.rebuilds: list[dict[str, Any]] = []  # run.json `rebuilds`: step, why, members, first call
        self._pending: list[dict[str, Any]] = []  # records to complete with the next call's time
        self.switches: dict[str, Any] | None = None  # member -> tf.Variable(bool), when members may leave by switch
        self.diverged_off: set[str] = set()  # diverged members switched off (frozen already: nothing of theirs changes)

    def build(self, members: list, step: int | None = None, why: str | None = None, also_note: dict | None = None) -> None:
        """Build over `members` (the first build, or a rebuild at `step` because of `why`)."""
        config = self.config
        ignore = config.data.ignore_label is not None
        compare = {m.name: make_loss(config.compare_loss(), ignore) for m in members if config.scored_on_compare_loss(m.spec)}
        for m in members:  # validation scores every mask-predicting member on the common loss too
            m.compare_loss_fn = make_loss(config.compare_loss(), ignore) if config.losses_differ() and m.spec.predicts_masks else None
        self.earlier_traces += self.train_loop.tracing_count() if self.train_loop else 0
        self.active = list(members)
        self.switches = self._make_switches(members)
        self.train_loop = make_train_loop(self.active, self.placement, self.global_step, config.data.batch_size, config.train.steps_per_call, compare, self.switches)
        self.eval_switched = self.switches is not None and self._members_may_leave()
        self._build_eval(self.active)
        if why is not None:
            record = {"step": step, "why": why, "members_after": len(members)}
            self.rebuilds.append(record)
            self._pending = [record] + ([also_note] if also_note is not None else [])

    def _make_switches(self, members: list) -> dict[str, Any] | None:
        """A switch per member on one replica: members leave a race or stop early by it, and the
        end-of-run probe times each member alone with it, all without a new trace. A switch that
        is on costs little (smoke's tiny networks, 476 steps of about 16 ms: 7.75 s without
        switches, 7.89 s with them, +1.8%, the mean of three runs each, whose spreads overlap)."""
        if self.placement.strategy.num_replicas_in_sync > 1:
            return None
        return make_switches(members, self.placement.strategy)

    def _members_may_leave(self) -> bool:
        """Whether members may leave mid-run (a race, early stopping): only then does the eval
        function read the switches. A switch in it costs a cond per member in its first trace
        (12 tiny members: the first validation 2.4 s without, 4.0-4.5 s with); a rebuild at a
        rung costs a new trace. A diverged member is left in a plain eval function (scored,
        not recorded), as it is rare."""
        train = self.config.train
        return train.race is not None or train.early_stopping is not None

    def _build_eval(self, members: list) -> None:
        self.earlier_eval_traces += self.evaluate.experimental_get_tracing_count() if self.evaluate else 0
        self.evaluate = make_eval_fn(members, self.config.data.classes, self.switches if self.eval_switched else None)
        self.evaluated = tuple(m.name for m in members)

    def depart(self, remaining: list, step: int, why: str, also_note: dict | None = None) -> None:
        """Members not in `remaining` leave: by their switch (no new trace of the step or the eval
        function), else by a rebuild over `remaining`."""
        if self.switches is None:
            self.build(remaining, step, why, also_note)
            return
        staying = {m.name for m in remaining}
        for name, switch in self.switches.items():
            if name not in staying:
                switch.assign(False)
        if not self.eval_switched:
            self._build_eval(remaining)
        record = {"step": step, "why": why, "members_after": len(remaining), "retraced": False if self.eval_switched else "eval function only"}
        self.rebuilds.append(record)
        if also_note is not None:
            also_note.update(retraced=False, traces=0)

    def switch_off_diverged(self, names: list[str]) -> list[str]:
        """Diverged members, frozen by their flag since, also stop computing: their forward and
        backward passes would run every step for nothing. By their switch only (no new trace); over
        several replicas, where there is none, they stay in the step, frozen. Returns those switched off."""
        leaving = [n for n in names if self.switches is not None and n in self.switches and n not in self.diverged_off]
        for name in leaving:
            self.switches[name].assign(False)
        self.diverged_off.update(leaving)
        return leaving

    def first_call_of_rebuild(self, k: int, seconds: float) -> bool:
        """Record a call's time if it was a rebuilt step's first (True: not steady-state time)."""
        if not self._pending:
            return False
        for record in self._pending:
            record.update(first_call_s=round(seconds, 3), first_call_steps=k, traces=self.train_loop.tracing_count())
        self._pending = []
        return True

    def eval_fn_over(self, members: list) -> Callable | None:
        """The eval function, already traced, if it can score exactly `members`, else None: the
        held-out test split reuses it instead of tracing another. One that reads the switches
        scores every member it was built over, each switched on for the call (and put back
        after); a plain one, only the members it was built over."""
        names = {m.name for m in members}
        if not self.eval_switched:
            return self.evaluate if set(self.evaluated) == names else None
        if not names <= set(self.switches):
            return None

        def evaluate_with_switches(dataset):
            was_on = {name: bool(switch.numpy()) for name, switch in self.switches.items()}
            try:
                for name, switch in self.switches.items():
                    switch.assign(name in names)
                return self.evaluate(dataset)
            finally:
                for name, switch in self.switches.items():
                    switch.assign(was_on[name])

        return evaluate_with_switches

    @property
    def trace_count(self) -> int:
        return self.earlier_traces + (self.train_loop.tracing_count() if self.train_loop else 0)

    @property
    def eval_trace_count(self) -> int:
        return self.earlier_eval_traces + (self.evaluate.experimental_get_tracing_count() if self.evaluate else 0)

    def call(self, iterator, k: int) -> dict:
        """k steps of the fused loop; every step's metrics back on the host in one sync."""
        tf = import_tf()
        try:
            raise_injected_oom()
            outputs = self.train_loop(iterator, k)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError) as exc:
            if any(m.spec.jit_compile for m in self.active):
                raise explain_jit_failure(self.active, self.config.data, exc) from None
            raise
        return tf.nest.map_structure(lambda t: t.numpy(), outputs)
