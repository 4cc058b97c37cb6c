"""Standard output for a reader that may stop reading: `harness runs | head -1`, `harness run ... |
head`. Python raises BrokenPipeError on the next write once the reader has gone, and rich answers
it with SystemExit(1): the command stopped where it was (a nightly's later steps not taken) and
exited 1, the contract's code for a bug in harness. With this stream the rest of what it prints
goes nowhere, the command finishes its work, and its own exit code stands."""

from __future__ import annotations

import os
from typing import TextIO


class ReaderMayLeave:
    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._nowhere()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._nowhere()

    def _nowhere(self) -> None:
        """The reader is gone: point the stream's file descriptor at /dev/null, so what the stream
        still buffers, and everything after it, is written and dropped without another error."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self._stream, name)
