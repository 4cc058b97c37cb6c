"""The outer loop of a run, as small as Orbit's `Controller.train`: train to the next event, write
what came back, validate when due, checkpoint when due, stop on a signal.

Everything it touches is passed in (the train and eval calls, the checkpointer, the writer), so
the loop is tested with fakes; "is it time?" lives in one place, `Schedule`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from harness.errors import EXIT_STOPPED_AT_ONCE
from harness.outputs.writers import Row


@dataclass(frozen=True)
class Schedule:
    """When things happen, in steps (1-based, counted after the update)."""

    total_steps: int
    steps_per_call: int
    steps_per_epoch: int
    checkpoint_every: int

    def next_call(self, step: int) -> int:
        """How many steps the next call runs: up to steps_per_call, but never past an epoch end, a
        checkpoint or the last step: there the loop has something to do."""
        to_event = min(p - step % p for p in (self.steps_per_epoch, self.checkpoint_every))
        return max(1, min(self.steps_per_call, to_event, self.total_steps - step))

    def validate_due(self, step: int) -> bool:
        return step % self.steps_per_epoch == 0 or step == self.total_steps

    def checkpoint_due(self, step: int) -> bool:
        return step % self.checkpoint_every == 0 or step == self.total_steps

    def epoch_of(self, step: int) -> int:
        return (step - 1) // self.steps_per_epoch + 1


class Writer(Protocol):
    def write(self, rows: Sequence[Row], step: int) -> None: ...


class StopFlag:
    """SIGTERM/SIGINT set a flag (the compiled call in progress finishes); the loop reads it once
    per call. A context manager: the previous handlers come back on exit.

    With a `notice`, the signal is acknowledged at once with it, even while the main thread is
    inside a long compiled call (where Python runs no handler until the call returns): the C-level
    handler writes the signal's number to a pipe (`signal.set_wakeup_fd`) and a thread blocked on
    the pipe prints the notice.

    With `at_once` too, a second Ctrl-C (SIGINT at least AGAIN_AFTER_S after the first: a launcher
    forwarding the terminal's own SIGINT to its workers delivers a duplicate within milliseconds)
    says `at_once` and ends the process there, without waiting for the call in progress: what a
    user pressing Ctrl-C again means. The newest checkpoint already written is intact (each is
    written whole, then named), so `harness resume` continues from it."""

    AGAIN_AFTER_S = 0.5

    def __init__(self, notice: str | None = None, stream=None, at_once: str | None = None):
        self.signal: int | None = None
        self.notice, self.stream, self.at_once = notice, stream, at_once
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._previous_fd = -1

    def request(self, signum: int, frame=None) -> None:
        self.signal = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal else ""

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():  # only it may handle signals
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self.request)
            if self.notice:
                self._watch()
        return self

    def _watch(self) -> None:
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._acknowledge, args=(read,), daemon=True, name="harness-signal-notice").start()

    def _acknowledge(self, read: int) -> None:
        told, first_interrupt = False, None
        while True:
            try:
                data = os.read(read, 16)
            except OSError:
                data = b""
            if not data:  # the write end was closed on exit
                os.close(read)
                return
            now = time.monotonic()
            names = {signal.Signals(b).name for b in data if b in (signal.SIGINT, signal.SIGTERM)}
            if names and not told:
                self._say(f"{'/'.join(sorted(names))} received: {self.notice}")
                told = True
            if signal.SIGINT in data:
                if first_interrupt is not None and now - first_interrupt >= self.AGAIN_AFTER_S and self.at_once:
                    self._say(f"SIGINT again: {self.at_once}")
                    os._exit(EXIT_STOPPED_AT_ONCE)
                if first_interrupt is None:
                    first_interrupt = now

    def _say(self, text: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(f"\nharness: {text}\n")
        stream.flush()

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_fd)
            os.close(self._pipe[1])  # the watching thread reads the end of the pipe, closes it and ends
            self._pipe = None


@dataclass
class Controller:
    schedule: Schedule
    train: Callable[[int, int], list[Row]]  # (step, k) -> rows of the k steps after `step`
    evaluate: Callable[[int], list[Row]]  # step -> validation rows
    checkpoint: Callable[[int], None]
    writer: Writer
    after_call: Callable[[int], None]  # step -> None: the run's record of its progress
    stop: StopFlag
    all_ended: Callable[[], bool] = lambda: False  # every member stopped or diverged: nothing left to train

    def run(self, step: int) -> int:
        """Train from `step`; return the step reached: the last one, or an earlier one after a stop
        signal or once every member has ended (a checkpoint was written at it)."""
        while step < self.schedule.total_steps:
            k = self.schedule.next_call(step)
            rows = self.train(step, k)
            step += k
            if self.schedule.validate_due(step):
                rows += self.evaluate(step)
            self.writer.write(rows, step)
            # Read the flag once: a signal arriving after this point is handled next time round,
            # never between deciding to save and deciding to stop.
            stopping = self.stop.signal is not None or self.all_ended()
            if self.schedule.checkpoint_due(step) or stopping:
                self.checkpoint(step)
            self.after_call(step)
            if stopping:
                return step
        return step
