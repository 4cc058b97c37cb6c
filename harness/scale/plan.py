"""The plan of a run: what each model costs, which models train together (groups that fit a
device's memory), on which devices, and how long it should take. `harness plan` prints it and
writes plan.json; `harness run` makes it itself when the members may not fit one group.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.config.recipes import models_kept
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError
from harness.scale.packing import Group, Need, makespan_s, pack, spread
from harness.scale.probe_member import measure, probe_config
from harness.rundir import atomic_write_text

GPU_SHARE = 0.9  # default budget: 90% of a GPU's memory (TensorFlow and CUDA keep some for themselves)


@dataclass(frozen=True)
class Devices:
    gpus: int
    gpu_memory_mb: float | None  # the smallest GPU's
    slots: tuple[str | None, ...]  # one per group that may run at once: a GPU index, or None (CPU)

    @property
    def kind(self) -> str:
        if not self.gpus:
            return "cpu"
        return f"gpu:{self.gpu_memory_mb:.0f}MB" if self.gpu_memory_mb is not None else "gpu:unknown-memory"


@dataclass
class Plan:
    budget_mb: float | None
    max_members: int | None
    devices: Devices
    models: list[dict[str, Any]]  # per model: its figures (for all its repeats)
    groups: list[Group]
    too_big: list[str]
    total_steps: int
    repeats: int = 1  # train.repeats: each model's figures are for all its seeds
    race_rung_steps: tuple[int, ...] = ()  # train.race: the steps after which its rungs drop models
    race_keep: float = 1.0  # the share of the models each rung keeps

    @property
    def group_seconds(self) -> list[float | None]:
        """Each group's training: its first call (tracing its fused step: the sum of its members'
        first calls alone, minutes for sm networks) and then its steps."""
        return [None if g.ms_per_step is None else (g.trace_s or 0.0) + g.ms_per_step * self.total_steps / 1000 for g in self.groups]

    @property
    def trace_s(self) -> float | None:
        """The tracing in the estimate, on the slots in order (groups trace as they start)."""
        traces = [g.trace_s for g in self.groups]
        return None if not traces or None in traces else makespan_s(traces, len(self.devices.slots))  # type: ignore[arg-type]

    @property
    def estimated_s(self) -> float | None:
        seconds = self.group_seconds
        return None if not seconds or None in seconds else makespan_s(seconds, len(self.devices.slots))  # type: ignore[arg-type]

    @property
    def race_kept(self) -> list[int]:
        """How many models train after each rung (each keeps `ceil(keep x models)`, more where
        models tie with the last one kept)."""
        kept, left = [], len(self.models)
        for _ in self.race_rung_steps:
            left = models_kept(self.race_keep, left)
            kept.append(left)
        return kept

    @property
    def race_estimated_s(self) -> tuple[float, float] | None:
        """A race's training (its one group's trace, then its steps with the members each rung
        leaves): with the fastest models kept at every rung, and with the slowest. Which are kept
        is known only at the rungs; `estimated_s` is every member to the end."""
        times = [m.get("ms_per_step") for m in self.models]
        if not self.race_rung_steps or len(self.groups) != 1 or None in times:
            return None
        trace = self.groups[0].trace_s or 0.0
        ends = (*self.race_rung_steps, self.total_steps)
        counts = [len(times), *self.race_kept]
        bounds = []
        for ordered in (sorted(times), sorted(times, reverse=True)):
            starts = (0, *self.race_rung_steps)
            bounds.append(trace + sum(sum(ordered[:n]) * (end - start) for n, start, end in zip(counts, starts, ends)) / 1000)
        return bounds[0], bounds[1]

    def device_of(self, index: int) -> str:
        """Where the index-th group starts when groups start in order on the free slots."""
        slot = self.devices.slots[index % len(self.devices.slots)]
        return "CPU" if slot is None else f"GPU {slot}"

    def memory_of(self) -> dict[str, float | None]:
        return {m["model"]: m.get("peak_mb") for m in self.models}

    def to_json(self) -> dict[str, Any]:
        return {
            "budget_mb": self.budget_mb, "max_members_per_group": self.max_members, "devices": asdict(self.devices),
            "models": self.models, "too_big": self.too_big, "total_steps": self.total_steps, "repeats": self.repeats,
            "groups": [{**asdict(g), "device": self.device_of(i), "estimated_s": s} for i, (g, s) in enumerate(zip(self.groups, self.group_seconds))],
            "estimated_s": self.estimated_s, "trace_s": self.trace_s,
            "race_estimated_s": self.race_estimated_s, "race_rung_steps": list(self.race_rung_steps), "race_kept": self.race_kept,
            "estimate_note": "group memory, step time and trace are the sums of their members' (safe side); run time on the slots in order, "
                             "each group's trace and steps; validation, checkpoints and the end of the run not in it",
        }

    def describe(self) -> list[str]:
        budget = f"{self.budget_mb:.0f} MB per device" if self.budget_mb else "no memory limit"
        where = f"{self.devices.gpus} GPU(s)" if self.devices.gpus else "the CPU"
        lines = [f"plan: {len(self.groups)} group(s) on {where}, {len(self.devices.slots)} at a time; {budget}"
                 + (f", at most {self.max_members} model(s) per group" if self.max_members else "")]
        for model in self.models:
            lines.append(f"  {model['model']:<28} params {_count(model.get('params'))}  FLOPs/example {_count(model.get('flops_per_example'))}  "
                         f"step memory {_mb(model.get('peak_mb'))}  {_ms(model.get('ms_per_step'))}/step  trace {_duration(model.get('trace_s'), short=True)}"
                         + ("  (cached)" if model.get("cached") else ""))
        if self.repeats > 1:
            lines.append(f"  repeats: {self.repeats} training seeds per model, so {self.repeats} members each: the step memory, time and trace "
                         f"above are {self.repeats} x one member's, and the input pipeline makes {self.repeats} streams of batches")
        for i, (group, seconds) in enumerate(zip(self.groups, self.group_seconds)):
            lines.append(f"  group {group.name} on {self.device_of(i)}: {', '.join(group.members)}  memory {_mb(group.memory_mb or None)}  "
                         f"{_ms(group.ms_per_step)}/step, about {_duration(seconds)} with its trace")
        for name in self.too_big:
            lines.append(f"  {name}: needs more than the budget even alone: it would be marked oom")
        everyone = " with every member to the end" if self.race_rung_steps else ""
        lines.append(f"  estimated training time{everyone}: {_duration(self.estimated_s)} for {self.total_steps} steps, {_duration(self.trace_s, short=True)} of it "
                     "tracing (sums of alone-times: for the steps an upper estimate, for the trace a lower one; not counted: validation, "
                     "checkpoints, and the end of the run: probes, test split, outputs)")
        if (race := self.race_estimated_s) is not None:
            kept = " then ".join(str(n) for n in self.race_kept)
            lines.append(f"  the race: its rungs after steps {', '.join(str(s) for s in self.race_rung_steps)} keep {kept} of the "
                         f"{len(self.models)} models: about {_duration(race[0])} to {_duration(race[1])} with its trace (the fastest "
                         "or the slowest models kept at every rung; which go on is known only at the rungs)")
        return lines


def find_devices(config: ExperimentConfig) -> Devices:
    """GPUs as TensorFlow sees them (listing them allocates no memory) and how many groups run at
    once: one per GPU by default; on a CPU one, unless placement.parallel_groups says otherwise."""
    from harness.core.backend import import_tf

    gpus = len(import_tf().config.list_physical_devices("GPU"))
    parallel = config.placement.parallel_groups or max(1, gpus)
    slots = tuple(str(i % gpus) for i in range(parallel)) if gpus else (None,) * parallel
    return Devices(gpus, _gpu_memory_mb() if gpus else None, slots)


def _gpu_memory_mb() -> float | None:
    """The smallest GPU's memory, from nvidia-smi (TensorFlow tells a device's total only once it
    has allocated on it, which the driver of a run must not do)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30).stdout
        return min(float(line) for line in out.split())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def budget_of(config: ExperimentConfig, devices: Devices) -> float | None:
    if config.placement.memory_budget_mb is not None:
        return float(config.placement.memory_budget_mb)
    if devices.gpus:
        if devices.gpu_memory_mb is None:
            raise ConfigError("placement.memory_budget_mb: the GPUs' memory cannot be read (no nvidia-smi); set the budget in MB")
        return GPU_SHARE * devices.gpu_memory_mb
    return None


def make_plan(config: ExperimentConfig, cache: Path, measure_members: bool, say=print) -> Plan:
    """Measure each model (if asked, or if a memory budget applies), then pack the models into
    groups. A model with repeats is packed with its seeds: R times its figures."""
    devices = find_devices(config)
    budget = budget_of(config, devices)
    repeats = config.train.repeats
    models = []
    for spec in config.models:
        figures: dict[str, Any] = {"model": spec.name}
        if measure_members or budget is not None:
            one = measure(probe_config(config, spec.name), cache, devices.kind, say)
            figures.update(one, model=spec.name, peak_mb=_times(one["peak_mb"], repeats), ms_per_step=_times(one["ms_per_step"], repeats),
                           trace_s=_times(one["trace_s"], repeats))
        models.append(figures)
    needs = [Need(m["model"], m.get("peak_mb"), m.get("ms_per_step"), m.get("trace_s")) for m in models]
    packing = pack(needs, budget, config.placement.max_members_per_group)
    groups = spread(packing.groups, needs, len(devices.slots))
    race = config.train.race
    rung_steps = tuple(race.rung_steps(config.data.steps_per_epoch)) if race is not None else ()
    return Plan(budget, config.placement.max_members_per_group, devices, models, groups, [n.name for n in packing.too_big], config.total_steps, repeats,
                rung_steps, race.keep if race is not None else 1.0)


def uses_groups(config: ExperimentConfig) -> bool:
    """Whether a run plans groups: asked for (a budget, a group size, parallel groups, Ray), or on
    GPUs with several models, where the default budget may not hold them all."""
    placement = config.placement
    if placement.grouping == "single" or placement.strategy == "multi_worker":
        return False
    asked = placement.engine == "ray" or any(v is not None for v in (placement.memory_budget_mb, placement.max_members_per_group, placement.parallel_groups))
    if asked:
        return True
    from harness.core.backend import import_tf

    return len(config.models) > 1 and bool(import_tf().config.list_physical_devices("GPU"))


def save_plan(plan: Plan, path: Path) -> None:
    atomic_write_text(path, json.dumps(plan.to_json(), indent=2) + "\n")


def _times(value: float | None, factor: int) -> float | None:
    return None if value is None else round(value * factor, 2)


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} MB"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def _duration(seconds: float | None, short: bool = False) -> str:
    if seconds is None:
        return "-" if short else "- (not measured: harness plan measures)"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
