"""Where a run's wall time goes, phase by phase, recorded in run.json `phases`: building, the first
call (tracing), the steady steps, the first and later validations, checkpoints and each end-of-run
action; with wall-clock marks, so a caller that started the process (`harness bench --section
fixed`) can add what came before the Runner (imports, config) and after it (the tail)."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator


class PhaseClock:
    def __init__(self):
        self.marks: dict[str, float] = {"runner_started": time.time()}
        self.seconds: dict[str, float] = {}
        self.steady_steps = 0

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + seconds, 3)

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - began)

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": dict(self.seconds), "steady_steps": self.steady_steps, "marks": {k: round(v, 3) for k, v in self.marks.items()}}
