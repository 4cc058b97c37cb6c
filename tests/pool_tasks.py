"""Tasks for tests/test_output_pool.py: module-level, so a worker process can import them by name."""

from __future__ import annotations

import multiprocessing
import os
import signal

from harness.errors import ConfigError


def in_a_worker() -> bool:
    return multiprocessing.parent_process() is not None


def where(value):
    return value, "worker" if in_a_worker() else "here"


def refuse(setting: str):
    raise ConfigError(f"{setting}: refused by the test's task")


def die_in_a_worker(value):
    """A worker killed mid-task (out of memory, a signal); run here it just answers."""
    if in_a_worker():
        os.kill(os.getpid(), signal.SIGKILL)
    return value


def loaded(prefixes: tuple[str, ...]) -> list[str]:
    import sys

    return sorted(m for m in sys.modules if m.startswith(prefixes))


def write_relative(name: str) -> str:
    """A file written at a path relative to the working folder; its mode comes from the umask."""
    from pathlib import Path

    from harness.rundir import atomic_write_text

    atomic_write_text(Path(name), "written\n")
    return os.getcwd()
