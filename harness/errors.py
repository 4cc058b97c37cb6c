"""Errors a user can act on, each carrying the exit code the contract gives it.

Anything that is not a `HarnessError` is a bug in harness: the CLI reports it with exit code 1.
"""

from __future__ import annotations

import difflib
import errno
import functools
import re
import os
import sys
import tempfile
import traceback
from typing import Iterable

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_DATA = 3
EXIT_RESOURCES = 4
EXIT_LOCKED = 5
EXIT_REGRESSION = 6
EXIT_INTERRUPTED = 75
EXIT_STOPPED_AT_ONCE = 130  # a second Ctrl-C: 128 + SIGINT, as a shell reports a process Ctrl-C ended


class HarnessError(Exception):
    """An error whose message is meant for the user, not a traceback."""

    exit_code = EXIT_BUG

    def __init__(self, message: str, problems: list[str] | None = None):
        self.headline = message
        self.problems = list(problems or [])
        super().__init__(message)

    def __str__(self) -> str:
        # The whole message, problems included: a traceback in a notebook or a script's
        # `print(exc)` shows what the command line shows, not only the headline.
        return self.render()

    def render(self) -> str:
        return "\n".join([self.headline] + [f"  - {p}" for p in self.problems])


class ConfigError(HarnessError):
    """Bad command line or bad config; every problem is listed at once."""

    exit_code = EXIT_USAGE


class DataError(HarnessError):
    """Bad input data; every bad file is named with its reason."""

    exit_code = EXIT_DATA


class ResourceError(HarnessError):
    """Disk full or out of memory."""

    exit_code = EXIT_RESOURCES


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> ResourceError | None:
    """A full disk met where nothing nearer said it (a nightly's own report after its run, a
    report rebuilt): exit 4 naming the file, not an internal error. The run and its checkpoints
    were written before; the file was written beside its name and renamed, so none is half."""
    if not is_disk_full(exc):
        return None
    return ResourceError(f"disk full while writing {exc.filename or 'a file'}: free some space on that disk, then run the command again")


def is_not_permitted(exc: BaseException) -> bool:
    """Refused for this user (permissions) or for everyone (a read-only filesystem)."""
    return isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def not_permitted(exc: BaseException) -> ConfigError | None:
    """A file or folder this user may not write (or read), met where nothing nearer said it: a
    results folder another user made, a read-only mount. Its path came from the command line or the
    config, so it is said as theirs (exit 2, naming it), not as an internal error."""
    if not is_not_permitted(exc):
        return None
    return ConfigError(f"{exc.filename or 'a file harness needs'}: {exc.strerror or exc} (for this user). Run the command as a user "
                       "who may write there, or point it at a folder you own (--results DIR, or a copy of the run folder)")


class OutOfMemory(ResourceError):
    """A device (or the host) ran out of memory: a group that meets it is split and retried."""


class LockedError(HarnessError):
    """Another live process holds the results directory."""

    exit_code = EXIT_LOCKED


class Interrupted(HarnessError):
    """SIGTERM/SIGINT arrived; a clean checkpoint was written before stopping."""

    exit_code = EXIT_INTERRUPTED


def closest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to `word` (a typo's likely meaning), if one is close enough; letter case
    counts for nothing (`fpn` is FPN, `Adam` adam), which difflib alone would weigh as typos."""
    choices = [str(c) for c in choices]
    by_lower = {c.lower(): c for c in reversed(choices)}  # the first of choices equal but for case
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[close[0]] if close else None


def did_you_mean(word: str, choices: Iterable[str], listing: str = "choose one of") -> str:
    """The tail of an "unknown X" message: the closest choice, if one is close, and the choices
    (after `listing`: "experiments with runs there:" where they are not choices of a setting)."""
    choices = [str(c) for c in choices]
    listed = f"{listing} {', '.join(choices)}" if choices else "there is nothing to choose from"
    close = closest(word, choices)
    return f"; did you mean {close!r}? ({listed})" if close else f"; {listed}"


def report_bug() -> int:
    text = traceback.format_exc()
    try:
        # A new file each time (O_EXCL, mode 0600): never one another user planted or linked.
        fd, crash = tempfile.mkstemp(prefix="harness-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        where = f"the traceback is in {crash}"
    except OSError:
        where = "traceback:\n" + text
    last = text.strip().splitlines()[-1]
    print(
        f"harness: internal error ({last}). This is a bug in harness, not in your config: "
        f"please report it on the harness issue tracker with the command you ran; {where}",
        file=sys.stderr,
    )
    return EXIT_BUG


class UserCodeError(ConfigError):
    """The user's own code (a model factory, a member kind) raised or returned something unusable;
    its problems carry the user's traceback lines, indented under the problem they belong to."""

    def render(self) -> str:
        return "\n".join([self.headline] + [f"    {p.strip()}" if p.startswith(" ") else f"  - {p}" for p in self.problems])


def user_frames(exc: BaseException) -> list[tuple[str, int, str, str]]:
    """The frames of `exc`'s traceback that are the user's code: not harness, not an installed
    package, not the standard library, as (path, line, function, source). An error raised while
    TensorFlow traced a function carries the traced code's frames in its message ("in user code:"),
    not in its traceback: those are read from the message."""
    frames = [(f.filename, f.lineno, f.name, f.line or "") for f in traceback.extract_tb(exc.__traceback__)]
    frames += [(m["path"], int(m["line"]), m["func"], m["source"]) for m in _TRACED_FRAME.finditer(str(exc))]
    return [frame for frame in frames if _is_users(frame[0])]


def user_traceback(exc: BaseException, limit: int = 12) -> list[str]:
    """`user_frames` as `File F, line N, in FUNC: SOURCE` lines, innermost last."""
    return [f"  File {path}, line {line}, in {func}: {source.strip()}" for path, line, func, source in user_frames(exc)][-limit:]


_TRACED_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)[ *]*\n\s*(?P<source>[^\n]*)')


def _is_users(path: str) -> bool:
    from pathlib import Path

    if path.startswith("<") or "__autograph_generated" in path:
        return False
    # A compiled extension's frame names its source relative to the package ("pandas/_libs/
    # parsers.pyx"): no file there, and not the user's. The user's modules are files on disk.
    if not Path(path).is_absolute() and not Path(path).is_file():
        return False
    return not str(Path(path).resolve()).startswith(_not_users_roots())


@functools.lru_cache(maxsize=1)
def _not_users_roots() -> tuple[str, ...]:
    """harness's own folder, the standard library's and the installed packages' (read once)."""
    import sysconfig
    from pathlib import Path

    libraries = (p for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_paths().get(key)))
    return tuple(str(Path(p).resolve()) for p in (Path(__file__).parent, *libraries))


def report_user_code(exc: BaseException, lines: list[str]) -> int:
    """An exception raised in the user's own code, met while harness ran it: theirs to fix (exit 2).
    A traced function's error ends its message with what was raised: that line is the one shown."""
    print(f"harness: your code raised {what_was_raised(exc)}", file=sys.stderr)
    print("  (in your code, innermost last:)", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    return EXIT_USAGE


def what_was_raised(exc: BaseException) -> str:
    """`Type: message` of what was raised; a traced function's error ends its long message with it."""
    text = [line.strip() for line in str(exc).splitlines() if line.strip()]
    what = text[-1] if text else ""
    return what if what.startswith(type(exc).__name__) else f"{type(exc).__name__}: {what}"
