"""The members of a run and how each one stands (run.json `models`): which still train, which
left (diverged, stopped early, dropped by a race) and at what step, and the train rows of a call
cut at each member's last trained step."""

from __future__ import annotations

from harness.outputs.writers import Row
from harness.rundir import MemberRecord, MemberStatus
from harness.training.controller import Schedule


class Roster:
    def __init__(self, members: list):
        self.members = members
        self.records: dict[str, MemberRecord] = {
            m.name: MemberRecord(params=m.params, trained_params=m.trained_params, higher_is_better=sorted(m.higher_is_better)) for m in members
        }

    def keep_ended(self, previous: dict[str, MemberRecord], start: int) -> None:
        """On resume, members stopped or dropped at or before the restored step stay so (a stopped
        member's flag is in the checkpoint; a dropped one is left out of the rebuilt step); a stop
        or a rung after it is decided again by the redone validations."""
        for name, before in previous.items():
            if before.status in (MemberStatus.STOPPED, MemberStatus.DROPPED) and before.changed_at_step <= start and name in self.records:
                mark = self.records[name].mark_stopped if before.status == MemberStatus.STOPPED else self.records[name].mark_dropped
                mark(before.changed_at_step)

    def read_statuses(self) -> None:
        """Divergence is found inside the step (a flag per member, no host sync): read the flags."""
        for m in self.members:
            record = self.records[m.name]
            if record.status == MemberStatus.OK and bool(m.diverged.numpy()):
                record.mark_diverged(int(m.diverged_step.numpy()))

    def training(self) -> list:
        """Members still in the fused step: not dropped by a race, not stopped early. (A diverged one
        stays, frozen by its flag; on one replica its switch is off too: CompiledMembers.switch_off_diverged.)"""
        return [m for m in self.members if self.records[m.name].status.trains]

    def diverged(self) -> list[str]:
        return [m.name for m in self.members if self.records[m.name].status == MemberStatus.DIVERGED]

    def all_ended(self) -> bool:
        return all(r.status != MemberStatus.OK for r in self.records.values())

    def is_ok(self, name: str) -> bool:
        return self.records[name].status == MemberStatus.OK

    def train_rows(self, outputs: dict, step: int, schedule: Schedule) -> list[Row]:
        """One row per member, metric and step of a call; none after a member's last trained step."""
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
