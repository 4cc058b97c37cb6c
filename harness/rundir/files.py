"""Writes that never leave a half-written file, the one clock every record is stamped with, and
the one reader of the CSV tables a run writes (floats back exactly as written)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from harness.errors import is_disk_full  # noqa: F401  (the rundir's, for its writers and callers)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers see old or new, never half.
    The file gets the mode any other tool's output would (0644 under umask 022): mkstemp makes
    it 0600, which teammates, a web server or a CI artifact step could not read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # the folder refuses a new file: name the file meant, not a temporary name
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a write or fsync on a full disk names no file: name the one meant
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


@contextlib.contextmanager
def replaced_whole(final: Path, partial: Path):
    """Write `partial` (a file or a folder beside `final`) in the with-block, then rename it to
    `final`: a reader sees the old one or the new one, never half. On any failure the partial is
    removed before the error goes on: a full disk must not keep what it could not finish taking
    the space the user frees for `harness resume`."""
    remove_path(partial)
    try:
        yield partial
        if partial.is_dir():
            remove_path(final)  # a folder cannot be renamed over a folder that holds files
        os.replace(partial, final)
    except BaseException:
        remove_path(partial)
        raise


def remove_path(path: Path) -> None:
    """Remove a file or a folder and what it holds; nothing there is not an error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def current_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask


def read_csv(source, **options):
    """pandas.read_csv, every float read back exactly as it was written. Before pandas 3 the
    parser's default rounds a 17-digit float to within one unit of its last place, not exactly: a
    loss written as 1.7855706214904785 came back 1.7855706214904783, so with pandas 2 (all that
    Python 3.10 gets) the losses a run's tables gave back differed from the run's own in their last
    bit, and merging groups' val_scores.csv rewrote such digits. pandas 3 reads exactly, and
    deprecates the option that asks for it."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) < 3:
        options.setdefault("float_precision", "round_trip")
    return pd.read_csv(source, **options)


def save_table_as(frame, path: Path, option: str) -> None:
    """A table the user asked for (`--csv FILE`), written whole or not at all; a path that cannot
    be written is named with the option that gave it (exit 2; a full disk exit 4), never an
    internal error. The folder is made if missing."""
    from harness.errors import ConfigError, ResourceError

    try:
        atomic_write_text(Path(path), frame.to_csv(index=False))
    except OSError as exc:
        if is_disk_full(exc):
            raise ResourceError(f"{option} {path}: disk full; nothing was written there") from None
        raise ConfigError(f"{option} {path}: cannot be written ({exc.strerror or exc})") from None


def make_folder(path: Path, given_by: str) -> Path:
    """`mkdir -p` of a folder the user named (`given_by`: the option or setting that named it): one
    that cannot be made (a file in its way, no permission) is a ConfigError naming it (exit 2), a
    full disk a ResourceError (exit 4), never an internal error."""
    from harness.errors import ConfigError, ResourceError

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_disk_full(exc):
            raise ResourceError(f"{given_by} {path}: disk full while creating it; free some space or choose another folder") from None
        raise ConfigError(f"{given_by} {path}: cannot be made a folder ({exc.strerror or exc}: {exc.filename or path})") from None
    return Path(path)
