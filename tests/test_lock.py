"""The folder lock: one holder at a time, nothing left behind when it lets go."""

from __future__ import annotations

import os

import pytest

from harness.errors import LockedError
from harness.rundir import FolderLock, holder_of


def test_a_held_lock_refuses_a_second_holder_and_leaves_no_file_when_released(tmp_path):
    with FolderLock(tmp_path, purpose="run"):
        assert holder_of(tmp_path)["pid"] == os.getpid()
        with pytest.raises(LockedError, match=f"pid {os.getpid()}"):
            FolderLock(tmp_path).acquire()
    assert not (tmp_path / ".lock").exists() and holder_of(tmp_path) is None
    with FolderLock(tmp_path):  # and it is taken again
        pass


def test_a_lock_taken_on_a_file_its_holder_just_removed_is_taken_again_on_the_new_file(tmp_path, monkeypatch):
    import fcntl

    stale = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    (tmp_path / ".lock").unlink()  # the holder let go: the file this process opened is no longer named .lock
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)
    first = iter([stale])
    real = FolderLock._lock_file
    monkeypatch.setattr(FolderLock, "_lock_file", lambda self: next(first, None) or real(self))
    lock = FolderLock(tmp_path).acquire()
    try:
        assert os.fstat(lock._fd).st_ino == os.stat(tmp_path / ".lock").st_ino, "held: the file named .lock"
    finally:
        lock.release()
