"""`harness workers N CONFIG`: a local multi-worker cluster for trying `multi_worker` out.

Starts N `harness run` processes on 127.0.0.1, each with its own TF_CONFIG (worker 0 is the chief
and writes the run directory), streams the chief's output, and stops them all if one fails, so it
never hangs waiting for a dead peer. On real machines, start `harness run` on each one with its
TF_CONFIG instead (see the README).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.errors import ConfigError


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def launch_local_workers(count: int, config: Path, overrides: list[str], results: Path | None) -> int:
    if count < 2:
        raise ConfigError(f"workers: give 2 or more workers (got {count}); one process needs no cluster")
    from harness.core.backend import user_environment

    addresses = [f"127.0.0.1:{port}" for port in free_ports(count)]
    processes = []
    for index in range(count):
        env = user_environment()
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})
        command = [sys.executable, "-m", "harness", "run", str(config)]
        command += [arg for override in overrides for arg in ("--set", override)]
        if results is not None:
            command += ["--results", str(results)]
        quiet = None if index == 0 else subprocess.DEVNULL  # only the chief talks
        processes.append(subprocess.Popen(command, env=env, stdout=quiet, stderr=quiet))
    return _wait_all(processes)


def _wait_all(processes: list[subprocess.Popen]) -> int:
    def forward(signum, frame):
        for p in processes:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            codes = [p.poll() for p in processes]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                # A dead peer leaves the others blocked in a collective forever: stop them.
                for p in processes:
                    if p.poll() is None:
                        p.terminate()
                for p in processes:
                    try:
                        p.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                return processes[0].returncode if processes[0].returncode not in (None, 0, -15) else failed[0]
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
