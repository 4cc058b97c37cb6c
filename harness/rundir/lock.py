"""An exclusive lock on a folder, held while a run (or a nightly) uses it.

The lock is an OS advisory lock (`flock`) on a `.lock` file, so the kernel releases it when the
holding process dies, however it dies: a lock left by a killed process is simply taken over. The
file also records who holds it (pid, host, since) for the message the second process prints, and
is removed when the holder lets go (a killed holder's file stays until the next holder takes it over).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from harness.errors import ConfigError, LockedError, ResourceError, is_disk_full, is_not_permitted
from harness.rundir.files import utc_now


class FolderLock:
    def __init__(self, folder: Path, purpose: str = "run"):
        self.path = Path(folder) / ".lock"
        self.purpose = purpose
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            fd = self._lock_file()
            if _still_named(fd, self.path):
                break
            os.close(fd)  # locked a file its holder removed as it let go: take the lock on the new one
        else:
            raise LockedError(f"{self.path} keeps changing under this process: another process is taking and leaving it")
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": utc_now(), "purpose": self.purpose}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def _lock_file(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _cannot_lock(self.path, self.purpose, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockedError(
                f"{self.path.parent} is locked by another {holder.get('purpose', 'run')}: "
                f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since "
                f"{holder.get('since', '?')}. Wait for it to finish, or stop that process."
            ) from None
        return fd

    def release(self) -> None:
        """The lock file goes while still held (a finished run keeps no empty .lock); a process that
        opened it just before finds it no longer named so, and locks the file a new open makes."""
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _cannot_lock(path: Path, purpose: str, exc: OSError) -> Exception:
    """The lock file is the first thing a run, resume, report or nightly writes in its folder, so a
    folder this user may only read (a colleague's results, a read-only mount) is met here: said as
    the folder named on the command line being unusable (exit 2), or a full disk (exit 4)."""
    if is_disk_full(exc):
        return ResourceError(f"{path.parent}: disk full; a {purpose} cannot even make its lock file there. "
                             "Free some space and run the command again; nothing in the folder was changed")
    if is_not_permitted(exc):
        then = ("this user may not write there, and a {purpose} writes its lock and its files in that folder. Run the command "
                "as a user who may, or on a copy of the folder (cp -r) in one you can write").format(purpose=purpose)
    else:
        then = f"move away what is at {path.name}"
    return ConfigError(f"{path.parent}: a {purpose} cannot make its lock file there ({exc.strerror or exc}: {path}); {then}. "
                       "Nothing in the folder was changed")


def _still_named(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}


def holder_of(folder: Path) -> dict | None:
    """Who holds the folder's lock right now (pid, host, since), or None: probed with a shared,
    non-blocking lock on a read-only handle, so it writes nothing and never waits."""
    path = Path(folder) / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # no lock file: never locked
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd) or {"pid": "?"}
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
