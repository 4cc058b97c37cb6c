"""What runs a group's process: this machine (`local`), or a Ray cluster (`ray`).

Both run the same command, `python -m harness.scale.worker GROUP_DIR`, and hand back its exit
code; neither schedules anything of its own beyond "one group per free device": Ray places its
tasks by their resources (a GPU each, or CPUs), retries them when a worker or a node is lost, and
starts a fresh worker process for each (so device memory is freed when a group ends).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.backend import user_environment
from harness.errors import ConfigError, ResourceError

PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass(frozen=True)
class GroupTask:
    name: str
    folder: Path
    members: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # extra environment of the group's process


def start_worker(folder: Path, env: dict[str, str]) -> subprocess.Popen:
    """`python -m harness.scale.worker GROUP_DIR`, ended by the kernel if its parent dies (a driver
    killed with SIGKILL, a Ray worker lost with its node): an orphan would go on holding the
    group's lock, and the group's retry could not take it."""
    return subprocess.Popen([sys.executable, "-m", "harness.scale.worker", str(folder)], env=env, preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class LocalEngine:
    """Group processes on this machine, one per slot; a slot is a device (a GPU index, given to
    the process as CUDA_VISIBLE_DEVICES so it sees only its own GPU) or a share of the CPU."""

    def __init__(self, slots: list[str | None]):
        self.free: list[str | None] = list(slots)
        self.running: dict[subprocess.Popen, tuple[GroupTask, str | None]] = {}

    def has_slot(self) -> bool:
        return bool(self.free)

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def start(self, task: GroupTask) -> str:
        device = self.free.pop(0)
        env = {**user_environment(), **task.env}
        if device is not None:
            env["CUDA_VISIBLE_DEVICES"] = device
        process = start_worker(task.folder, env)
        self.running[process] = (task, device)
        return f"GPU {device}" if device is not None else "CPU"

    def wait(self, timeout: float) -> list[tuple[GroupTask, int]]:
        """The groups that ended within `timeout` seconds, with their exit codes."""
        deadline = time.monotonic() + timeout
        while True:
            done = [(p, p.poll()) for p in list(self.running)]
            ended = [(p, code) for p, code in done if code is not None]
            if ended or time.monotonic() >= deadline or not self.running:
                break
            time.sleep(0.1)
        finished = []
        for process, code in ended:
            task, device = self.running.pop(process)
            self.free.append(device)
            finished.append((task, code))
        return finished

    def interrupt(self) -> None:
        """Ask every running group to checkpoint and stop (each exits 75)."""
        for process in self.running:
            process.send_signal(signal.SIGTERM)

    def close(self) -> None:
        for process in self.running:
            process.kill()
        for process in self.running:
            process.wait()
        self.running.clear()


CONNECT_TIMEOUT_S = 10.0  # Ray itself retries an unreachable head node for ever


def check_reachable(address: str | None) -> None:
    """A head node named by host:port must answer on that port within CONNECT_TIMEOUT_S: Ray's own
    client would wait for ever. ('auto', 'local' and no address are Ray's to resolve.)"""
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise cluster_unreachable(address, exc) from None


def cluster_unreachable(address: str | None, exc: BaseException) -> ResourceError:
    """Exit 4: what was tried, what Ray said, and what to check."""
    target = address or os.environ.get("RAY_ADDRESS") or "a new local Ray instance (no placement.ray.address, no RAY_ADDRESS)"
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return ResourceError(
        f"placement.engine: ray could not start or join a Ray cluster at {target}: {type(exc).__name__}: {said}",
        [
            "is the cluster up? `ray status` on its head node; start it with `ray start --head`",
            "RAY_ADDRESS or placement.ray.address: host:port of the head node's GCS (default port 6379), or 'auto'",
            "the ports between this machine and the head node (GCS 6379, the dashboard 8265) open",
            "on a loaded machine a local instance may time out while starting: try again, or start one with `ray start --head` first",
            "nothing was trained; the run folder, if it existed, is as it was: run (or `harness resume`) again once Ray is up",
        ],
    )


class RayEngine:
    """Each group one Ray task: `num_gpus: 1` where the cluster has GPUs, else CPUs; Ray queues
    what does not fit yet. Groups write under the run directory, which every node must see (a
    shared filesystem); the driver merges what they wrote."""

    def __init__(self, address: str | None, max_retries: int, cpus_per_group: float):
        try:
            import ray
        except ImportError:
            raise ConfigError('placement.engine: ray needs Ray: pip install "harness[ray]"') from None
        self.ray = ray
        try:
            if not ray.is_initialized():
                check_reachable(address or os.environ.get("RAY_ADDRESS"))
                # address None: RAY_ADDRESS if set, else a local instance (Ray's own rule)
                ray.init(address=address, include_dashboard=False, log_to_driver=True, configure_logging=False)
            gpus = ray.cluster_resources().get("GPU", 0)
        except Exception as exc:  # Ray raises ConnectionError, TimeoutError, RuntimeError, its own: all mean "no cluster"
            raise cluster_unreachable(address, exc) from None
        resources = {"num_gpus": 1, "num_cpus": 0} if gpus else {"num_cpus": cpus_per_group}
        # max_calls=1: a fresh worker process per group, whose memory goes when it ends.
        self.remote = ray.remote(max_calls=1, max_retries=max_retries, **resources)(run_worker_task)
        self.uses_gpus = bool(gpus)
        self.running: dict = {}

    def has_slot(self) -> bool:
        return True  # Ray holds tasks until their resources are free

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def start(self, task: GroupTask) -> str:
        self.running[self.remote.remote(str(task.folder), task.env)] = task
        return "ray (a GPU)" if self.uses_gpus else "ray"

    def wait(self, timeout: float) -> list[tuple[GroupTask, int]]:
        if not self.running:
            return []
        ready, _ = self.ray.wait(list(self.running), num_returns=len(self.running), timeout=timeout)
        finished = []
        for ref in ready:
            task = self.running.pop(ref)
            try:
                code = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:  # retries used up: workers or nodes kept dying
                print(f"harness: group {task.name}: Ray gave up on it: {str(exc).splitlines()[0][:300]}", file=sys.stderr)
                code = 1
            finished.append((task, code))
        return finished

    def interrupt(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref)  # KeyboardInterrupt in the task, which stops its process cleanly

    def close(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref, force=True)
        self.running.clear()


def run_worker_task(folder: str, env: dict[str, str]) -> int:
    """A Ray task: the group's process, with the GPU Ray gave this task (CUDA_VISIBLE_DEVICES is
    set by Ray). A cancelled task stops its process with SIGTERM, so it checkpoints first."""
    process = start_worker(Path(folder), {**user_environment(), **env})
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGTERM)
        return process.wait()
