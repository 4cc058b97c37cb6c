"""`harness doctor`: does this machine run harness as it should? Versions, devices and memory,
whether XLA, mixed precision and op determinism work, and a tiny fused step of two members on every
placement the machine allows, its losses checked against the CPU's. GPU users run it first."""

from harness.doctor.report import run_doctor

__all__ = ["run_doctor"]
