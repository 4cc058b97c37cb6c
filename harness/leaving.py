"""Leaving a harness process once its work is done, without the interpreter's teardown.

Tearing down TensorFlow's objects took seconds after a command's last line (39 s once, after a
resnet run), which a user, a nightly job and a group's driver (it waits for each group's process
to end) would wait for. Every file is complete when the work returns, so the process leaves at
once, in this order: flush what was printed; stop the idle output processes and a Ray instance it
started (both would outlive an abrupt exit); run the exit handlers a normal exit runs (TensorFlow's
among them, which remove the source files AutoGraph wrote to the temp folder: skipped, they were
left there by every run); and exit. Ground floor: it imports no other part of harness.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn


def leave(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone, a stream closed: nothing more reaches it
            pass
    if (pool := sys.modules.get("harness.outputs.pool")) is not None:
        pool.stop()
    if (ray := sys.modules.get("ray")) is not None and ray.is_initialized():
        ray.shutdown()
    atexit._run_exitfuncs()  # under a millisecond, measured after smoke and after four sm networks
    logging.shutdown()
    os._exit(code)
