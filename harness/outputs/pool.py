"""Output processes: a run's statistics, plots and report page written by worker processes that
loaded their libraries while the run trained, several plots at once.

Why: on a small run the end of the run is mostly imports and matplotlib. scipy.stats (0.9-1.2 s
here), matplotlib (0.6 s) and harness's own output modules (0.4 s) are loaded by each worker in the
background instead, on a core the run's tracing leaves idle, and the plots, each a pure function of
tables, are drawn on every core at once. The main process never loads them.

A task is named by "module:function" (the main process must not import the module to name it)
and called with picklable arguments (paths, configs, DataFrames). Results are the same files
either way: a task that fails in a worker, or a pool that cannot start or breaks (a worker killed,
spawning forbidden), is run again in this process, which then raises its real error or succeeds.
`HARNESS_OUTPUT_PROCESSES=0` keeps everything in this process; a number sets how many workers.

The pool is made once per process and reused by later runs (the API in a notebook, the tests).
Workers ignore Ctrl-C (the run handles it) and leave when their parent is gone. They never run the
user's script: spawn would import the parent's `__main__` in each worker, and a script that calls
`harness.run` without an `if __name__ == "__main__":` guard would train again in every worker.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading
import types
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from harness.errors import ConfigError

ENV = "HARNESS_OUTPUT_PROCESSES"
MAX_WORKERS = 4  # a run's end has 6-9 tasks, a few of them long: more workers would mostly idle
# Loaded by every worker as it starts: what the output tasks need.
PRELOAD = ("harness.outputs.tasks",)

_lock = threading.Lock()
_main_lock = threading.Lock()  # one stand-in `__main__` at a time (see _main_script_hidden)
_pool: ProcessPoolExecutor | None = None
_started = 0  # workers asked for so far
_warming: list[Future] = []  # their warm-ups not known to be done
_broken = False  # a pool that broke is not started again in this process


def worker_count() -> int:
    """Workers to start: HARNESS_OUTPUT_PROCESSES if set, else one per usable core up to
    MAX_WORKERS; 0 on a single core, where a worker would only take turns with the run."""
    setting = os.environ.get(ENV, "").strip()
    if setting:
        if not setting.isdigit():
            raise ConfigError(f"{ENV}={setting!r}: the number of output processes, 0 or more (0: everything in the run's own process)")
        return int(setting)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(MAX_WORKERS, cores) if cores > 1 else 0


def start(workers: int | None = None) -> None:
    """Have `workers` workers (default: `worker_count()`) start and load their libraries; returns
    at once. Each start costs a core about 2 s of imports: start them where the run leaves a core
    idle (one while it loads TensorFlow, the rest once its step is traced: `grow`)."""
    global _pool, _started
    with _lock:
        most = worker_count()
        wanted = most if workers is None else min(workers, most)
        if _broken or wanted <= _started:
            return
        import multiprocessing

        try:
            if _pool is None:
                # spawn, not fork: a fork of a process running TensorFlow's threads may deadlock.
                _pool = ProcessPoolExecutor(most, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker, initargs=(os.getpid(),))
            with _main_script_hidden():
                for _ in range(wanted):  # a submission with no idle worker starts one more, up to `most`
                    _warming.append(_pool.submit(_warm_up))
            _started = wanted
        except Exception:  # noqa: BLE001 (no processes here: everything runs in this process)
            _mark_broken()


def grow() -> None:
    """Start the rest of the workers of a pool this process started (none: nothing to do, as in a
    group's process, whose driver writes the outputs)."""
    if _pool is not None:
        start()


def settle(timeout: float = 120.0) -> None:
    """Wait until every worker started has loaded its libraries: a measurement taken meanwhile
    (the run's probes) would share its cores with them."""
    from concurrent.futures import wait

    with _lock:
        warming = list(_warming)
    wait(warming, timeout=timeout)
    with _lock:
        _warming[:] = [f for f in _warming if not f.done()]


def stop() -> None:
    """Let the workers go (they are idle at the end of a run: a few ms)."""
    global _pool, _started
    with _lock:
        pool, _pool, _started = _pool, None, 0
        _warming.clear()
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


def submit(task: str, *args: Any) -> Future:
    """Run `task` ("module:function") with `args` in a worker, or here when there is none (the
    future is then already done). Read its result with `result`."""
    pool = _pool
    if pool is not None:
        try:
            with _main_script_hidden():  # a submission may start a worker too
                future = pool.submit(_call_as_caller, _caller_context(), task, *args)
            future.task = (task, args)  # type: ignore[attr-defined]
            return future
        except Exception:  # noqa: BLE001 (a broken or shut-down pool: run it here)
            _mark_broken()
    return _here(task, *args)


def result(future: Future) -> Any:
    """The task's result; a task that failed in a worker is run again here, where it raises its
    own error, with its own traceback, or succeeds (the worker, not the task, was at fault)."""
    try:
        return future.result()
    except Exception:  # noqa: BLE001
        task = getattr(future, "task", None)
        if task is None:  # it already ran here: its error is the task's own
            raise
        return call(task[0], *task[1])


def run(task: str, *args: Any) -> Any:
    """`task(*args)` in a worker if there is one, and its result."""
    return result(submit(task, *args))


def call(task: str, *args: Any) -> Any:
    module, _, name = task.partition(":")
    return getattr(importlib.import_module(module), name)(*args)


def _caller_context() -> tuple[int, str]:
    """What a worker must share with the caller at the moment of the call, not at its own start:
    the umask its files get their mode from, and the folder relative paths start at (a notebook
    or a test may change either between runs of one process)."""
    from harness.rundir import current_umask  # here, not above: every command imports this module, few submit

    return current_umask(), os.getcwd()


def _call_as_caller(context: tuple[int, str], task: str, *args: Any) -> Any:
    umask, folder = context
    os.umask(umask)
    os.chdir(folder)
    return call(task, *args)


def _here(task: str, *args: Any) -> Future:
    future: Future = Future()
    try:
        future.set_result(call(task, *args))
    except Exception as exc:  # noqa: BLE001 (raised by `result`, as a worker's would be)
        future.set_exception(exc)
    return future


@contextlib.contextmanager
def _main_script_hidden():
    """While workers may start (each submission, in this thread): `__main__` is a stand-in with
    no file and no module name, so spawn starts them without importing the user's script.

    spawn imports the parent's `__main__` in each child so that functions defined there can be
    unpickled; harness's tasks are named by module and never defined there. A script without an
    `if __name__ == "__main__":` guard (the shape of docs/api.md's example) would otherwise run
    again in every worker: a call of `harness.run` trained once more per worker, each writing a
    run directory of its own. Only process starts read it; the window is one submission. Held
    under a lock of its own: two threads submitting at once would otherwise each save the other's
    stand-in, and the last to leave could put a stand-in back for good."""
    with _main_lock:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is None:
                del sys.modules["__main__"]
            else:
                sys.modules["__main__"] = main


def _mark_broken() -> None:
    global _pool, _broken, _started
    pool, _pool, _broken, _started = _pool, None, True, 0
    _warming.clear()
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _init_worker(parent: int) -> None:
    """In each worker: Ctrl-C is the run's to handle (a terminal sends it to every process of the
    job); leave quietly when the parent is gone (killed, or exited without stopping the pool);
    load the output libraries."""
    import signal
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # At its end a worker skips the interpreter's teardown of every module it loaded (0.3-0.6 s
    # here, which `stop`, and so the command's exit, would wait for): it has no files open.
    atexit.register(_leave_now)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    for module in PRELOAD:
        importlib.import_module(module)


def _leave_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _warm_up() -> None:
    """A first figure drawn: matplotlib loads its fonts at its first text (0.2-0.4 s)."""
    call("harness.outputs.tasks:warm_up")
