"""The machine a run's timed costs were measured on (run.json `hardware`), and whether two runs'
machines differ.

ms/step, images/s, latency and serving throughput are timings: between runs on different
machines they measure the machines as much as the models. Parameters, FLOPs and file sizes do
not depend on the machine. `harness compare` says when its runs' machines differ, and a nightly
comparison does not judge a timed cost against a night that ran on other hardware.

A run of groups (Ray) may time its models on several machines: run.json's `hardware` is then
`{"machines": [...]}`, and each group's entry in `groups` names its own (`hardware`). Such a run's
timings are not compared as one machine's, with each other or with another run's: which group
lands where changes from run to run.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any


def this_machine(gpus: list[str] | None = None) -> dict[str, Any]:
    """This machine: its host name, CPU model and count, and the GPUs TensorFlow names."""
    return {"host": socket.gethostname(), "cpu": _cpu_model(), "cpus": os.cpu_count(), "gpus": list(gpus or [])}


def _cpu_model() -> str:
    try:  # Linux names the model; platform.processor() there is often just "x86_64"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def common_machine(machines: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The one machine these (a run's groups' `hardware`) all are; `{"machines": [...]}` for
    several, each once in order; None when none was recorded."""
    known: list[dict[str, Any]] = []
    for machine in machines:
        if machine and machine not in known:
            known.append(machine)
    if len(known) > 1:
        return {"machines": known}
    return known[0] if known else None


def several(machine: Any) -> bool:
    """A run whose models were timed on more than one machine."""
    return isinstance(machine, dict) and "machines" in machine


def describe(machine: dict[str, Any]) -> str:
    if several(machine):
        return f"{len(machine['machines'])} machines: " + "; ".join(describe(m) for m in machine["machines"])
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    return f"{machine.get('host')}: {machine.get('cpu')} x{machine.get('cpus')}, {gpus}"


def differs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two recorded machines that are not the same one (unknown, from a run recorded before
    run.json had `hardware`: not said to differ). A run timed on several machines differs from
    every run, itself on the same machines included: its models may have landed elsewhere."""
    if not a or not b:
        return False
    if several(a) or several(b):
        return True
    return any(a.get(key) != b.get(key) for key in ("host", "cpu", "cpus", "gpus"))
