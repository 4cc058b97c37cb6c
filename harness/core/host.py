"""This machine's memory, as the kernel reports it (Linux's /proc/meminfo; elsewhere unknown)."""

from __future__ import annotations


def memory_bytes() -> tuple[int, int] | None:
    """(total, available) bytes of host memory, or None where the kernel does not say.
    "Available" is the kernel's own estimate of what a new process can take without swapping."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            fields = dict(line.split(":", 1) for line in handle)
        return tuple(int(fields[key].split()[0]) * 1024 for key in ("MemTotal", "MemAvailable"))  # type: ignore[return-value]
    except (OSError, KeyError, ValueError):
        return None
