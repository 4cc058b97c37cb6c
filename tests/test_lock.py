"""The folder lock: one holder at a time, nothing left behind when it lets go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.errors import ConfigError, LockedError, ResourceError
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


def test_a_folder_this_user_cannot_write_in_is_named_not_a_crash(tmp_path, monkeypatch):
    """A colleague's run or a read-only mount: the lock file is the first write, and it is refused."""
    real_open = os.open

    def refused(path, flags, *mode):
        if str(path).endswith(".lock") and flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *mode)

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(ConfigError, match=f"{tmp_path}: a report cannot make its lock file there \\(Permission denied") as raised:
        FolderLock(tmp_path, purpose="report").acquire()
    assert "this user may not write there, and a report writes its lock" in str(raised.value) and "copy of the folder" in str(raised.value)
    monkeypatch.setattr(os, "open", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(ResourceError, match="disk full"):
        FolderLock(tmp_path).acquire()


def test_a_lock_path_that_cannot_be_opened_stops_nightly_before_training(tmp_path, capsys):
    """Root may write anywhere, so here the refused open is real another way: `.lock` is a folder."""
    from harness.cli import main

    (tmp_path / "smoke" / ".lock").mkdir(parents=True)
    smoke = Path(__file__).resolve().parents[1] / "experiments" / "smoke.yaml"
    assert main(["nightly", str(smoke), "--results", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert f"{tmp_path / 'smoke'}: a nightly cannot make its lock file there (Is a directory" in said
    assert "move away what is at .lock" in said and "internal error" not in said
    assert sorted(p.name for p in (tmp_path / "smoke").iterdir()) == [".lock"], "nothing made beside it"
