"""Packing members into groups that fit, and what the groups will cost: pure functions of the
measured figures (no TensorFlow, no processes), so the plan is tested with plain numbers.

A group's memory is the sum of its members' measured peaks: a fused step holds every member's
weights and optimizer state at once, and TensorFlow may run members' forward passes side by
side, so the sum is the safe side of the truth (the bench's `scale` section measures how far off
it is). A group's step time is likewise the sum of its members' (the fused step measured 0.75-0.8
of the sum on a CPU: Benchmarks, `scaling`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Need:
    """What one member needs: measured peak memory of one training step, its step time, and the
    seconds of its first call (tracing it, and one step)."""

    name: str
    memory_mb: float | None = None
    ms_per_step: float | None = None
    trace_s: float | None = None


@dataclass
class Group:
    name: str
    members: list[str] = field(default_factory=list)
    memory_mb: float = 0.0
    ms_per_step: float | None = 0.0
    trace_s: float | None = 0.0  # a fused step traces each member's part: the sum of their first calls

    def add(self, need: Need) -> None:
        self.members.append(need.name)
        self.memory_mb += need.memory_mb or 0.0
        self.ms_per_step = _sum(self.ms_per_step, need.ms_per_step)
        self.trace_s = _sum(self.trace_s, need.trace_s)


def _sum(total: float | None, more: float | None) -> float | None:
    """A sum that is unknown once one of its parts is (a member not measured)."""
    return None if total is None or more is None else total + more


@dataclass(frozen=True)
class Packing:
    groups: list[Group]
    too_big: list[Need]  # members whose own step needs more than the budget: they cannot run


def pack(needs: list[Need], budget_mb: float | None, max_members: int | None) -> Packing:
    """First-fit decreasing: the largest member first, each into the first group it fits in
    (memory under the budget, count under the maximum), else a new group. Members keep config
    order within a group. Ties in memory keep config order, so a plan is stable."""
    order = {need.name: i for i, need in enumerate(needs)}
    too_big = [n for n in needs if budget_mb is not None and (n.memory_mb or 0.0) > budget_mb]
    fitting = sorted((n for n in needs if n not in too_big), key=lambda n: (-(n.memory_mb or 0.0), order[n.name]))
    bins: list[Group] = []
    chosen: dict[str, Group] = {}
    for need in fitting:
        home = next((g for g in bins if _fits(g, need, budget_mb, max_members)), None)
        if home is None:
            home = Group(name=f"g{len(bins) + 1}")
            bins.append(home)
        home.add(need)
        chosen[need.name] = home
    for group in bins:
        group.members.sort(key=order.__getitem__)
    return Packing(bins, too_big)


def _fits(group: Group, need: Need, budget_mb: float | None, max_members: int | None) -> bool:
    if max_members is not None and len(group.members) >= max_members:
        return False
    return budget_mb is None or group.memory_mb + (need.memory_mb or 0.0) <= budget_mb


def split_in_two(members: list[str], memory: dict[str, float | None]) -> tuple[list[str], list[str]]:
    """A group that ran out of memory, as two halves of about equal memory (largest first, each
    to the lighter half), each in config order."""
    halves: tuple[list[str], list[str]] = ([], [])
    loads = [0.0, 0.0]
    for name in sorted(members, key=lambda m: -(memory.get(m) or 0.0)):
        lighter = 0 if (loads[0], len(halves[0])) <= (loads[1], len(halves[1])) else 1
        halves[lighter].append(name)
        loads[lighter] += memory.get(name) or 0.0
    position = {m: i for i, m in enumerate(members)}
    return tuple(sorted(h, key=position.__getitem__) for h in halves)  # type: ignore[return-value]


def makespan_s(group_seconds: list[float], slots: int) -> float:
    """Wall time of groups run on `slots` devices at once, each group to the first free device
    in order (what the local engine does)."""
    free = [0.0] * max(1, slots)
    heapq.heapify(free)
    for seconds in group_seconds:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def spread(groups: list[Group], needs: list[Need], slots: int) -> list[Group]:
    """More devices than groups: split groups, the slowest (else the largest) first, until every
    device has one or every group is a single member. Packing for memory alone would leave seven
    of eight GPUs idle when everything fits on one."""
    by_name = {n.name: n for n in needs}
    groups = list(groups)
    while len(groups) < slots:
        splittable = [g for g in groups if len(g.members) > 1]
        if not splittable:
            break
        widest = max(splittable, key=lambda g: (g.ms_per_step or 0.0, g.memory_mb, len(g.members)))
        cost = {m: by_name[m].ms_per_step if by_name[m].ms_per_step is not None else by_name[m].memory_mb for m in widest.members}
        halves = split_in_two(widest.members, cost)
        index = groups.index(widest)
        groups[index : index + 1] = [_group_of(f"{widest.name}{s}", half, by_name) for s, half in zip("ab", halves)]
    for i, group in enumerate(groups, 1):
        group.name = f"g{i}"
    return groups


def _group_of(name: str, members: list[str], needs: dict[str, Need]) -> Group:
    group = Group(name)
    for member in members:
        group.add(needs[member])
    return group
