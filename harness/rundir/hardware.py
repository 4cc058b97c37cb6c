"""The machine a run's timed costs were measured on (run.json `hardware`), and whether two runs'
machines differ.

ms/step, images/s, latency and serving throughput are timings: between runs on different
machines they measure the machines as much as the models. Parameters, FLOPs and file sizes do
not depend on the machine. `harness compare` says when its runs' machines differ, and a nightly
comparison does not judge a timed cost against a night that ran on other hardware.
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


def describe(machine: dict[str, Any]) -> str:
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    return f"{machine.get('host')}: {machine.get('cpu')} x{machine.get('cpus')}, {gpus}"


def differs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two recorded machines that are not the same one (unknown, from a run recorded before
    run.json had `hardware`: not said to differ)."""
    if not a or not b:
        return False
    return any(a.get(key) != b.get(key) for key in ("host", "cpu", "cpus", "gpus"))
