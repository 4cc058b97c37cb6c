"""The machine a run's timed costs were measured on (run.json `hardware`), and whether two runs'
machines differ.

ms/step, images/s, latency and serving throughput are timings: between runs on different
machines they measure the machines as much as the models. Parameters, FLOPs and file sizes do
not depend on the machine. `harness compare` says when its runs' machines differ, and a nightly
comparison does not judge a timed cost against a night that ran on other hardware.

The CPU's model name does not tell two hosts apart: a virtual machine's often reads "Intel(R)
Xeon(R) Processor" on hosts with other vector instructions, and TensorFlow's CPU kernels (oneDNN)
choose their code by those instructions, so both the timings and, in the default fast mode, a run's
digits follow them (measured: the same code and config, on a machine that read so both days,
scored unet's test IoU 0.8955 on 11-28 and 0.8816 on 11-30; docs/interruptions.md). `cpu_isa`
names the instruction sets those kernels choose between that this CPU has; a run recorded before
it (harness 0.3.2 and earlier) names none, and is not known to have run on the same CPU as one
that does.

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


# The instruction sets TensorFlow's CPU kernels dispatch on, as /proc/cpuinfo names them (x86's
# `flags`, Arm's `Features`), in the order they are said.
KERNEL_ISAS = ("sse4_2", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
               "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm", "sme")


def this_machine(gpus: list[str] | None = None, onednn: bool | None = None) -> dict[str, Any]:
    """This machine: its host name, CPU model, count and kernel instruction sets, the GPUs
    TensorFlow names, and whether TensorFlow's CPU kernels are oneDNN's (`onednn`, as the caller,
    who has TensorFlow loaded, read it: core.backend.onednn_enabled; None where unknown)."""
    cpuinfo = _cpuinfo()
    return {"host": socket.gethostname(), "cpu": _cpu_model(cpuinfo), "cpus": os.cpu_count(), "cpu_isa": _cpu_isa(cpuinfo),
            "onednn": onednn, "gpus": list(gpus or [])}


def _cpuinfo() -> str | None:
    """Linux's /proc/cpuinfo, read once for the model and the instruction sets; None elsewhere."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def _cpu_isa(cpuinfo: str | None) -> list[str] | None:
    """The KERNEL_ISAS this CPU has (None where the system does not say: not Linux)."""
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            present = set(value.split())
            return [isa for isa in KERNEL_ISAS if isa in present]
    return None


def _cpu_model(cpuinfo: str | None) -> str:
    for line in (cpuinfo or "").splitlines():  # Linux names the model; platform.processor() there is often just "x86_64"
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
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
    kernels = " ".join(machine.get("cpu_isa") or [])
    if machine.get("onednn") is not None:
        kernels = "; ".join(filter(None, (kernels, f"oneDNN {'on' if machine['onednn'] else 'off'}")))
    return f"{machine.get('host')}: {machine.get('cpu')} x{machine.get('cpus')}" + (f" ({kernels})" if kernels else "") + f", {gpus}"


def differs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two recorded machines that are not the same one (unknown, from a run recorded before
    run.json had `hardware`: not said to differ). A run timed on several machines differs from
    every run, itself on the same machines included: its models may have landed elsewhere. One
    that names its CPU's instruction sets differs from one that does not (recorded before
    `cpu_isa`): the same model name has run on CPUs with other kernels, as `harness compare`
    tells them apart by what `describe` says. So with `onednn` (harness 0.3.4): one CPU runs other
    kernels with oneDNN on (TF_ENABLE_ONEDNN_OPTS) than off, and its timings and digits change."""
    if not a or not b:
        return False
    if several(a) or several(b):
        return True
    return any(a.get(key) != b.get(key) for key in ("host", "cpu", "cpus", "cpu_isa", "onednn", "gpus"))
