"""The single-writer lock of a log directory: an ``flock`` on ``<dir>/LOCK``.

``flock`` locks belong to the open file, so a second writer is refused whether it lives in
another process or in this one; the kernel drops the lock when the holder dies. Readers
never take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from log.errors import LogLockedError

LOCK_NAME = "LOCK"
_PROC_LOCKS = Path("/proc/locks")


class DirectoryLock:
    """An exclusive, non-blocking writer lock held until ``release``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``LogLockedError`` naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise LogLockedError(str(self.path.parent), holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the file releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def writer_holds(directory: Path) -> bool | None:
    """Whether a writer holds the lock of the log in ``directory`` now, found without touching
    the lock (taking it even briefly could turn a starting writer away): the kernel's lock
    table (``/proc/locks``), else whether the pid the lock file names is alive. None: cannot
    tell."""
    path = directory / LOCK_NAME
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    except OSError:
        return None
    held = _flock_held(stat)
    if held is not None:
        return held
    try:
        words = path.read_text("ascii", "replace").split()
    except OSError:
        return None
    if len(words) != 2 or words[0] != "pid" or not words[1].isdigit():
        return None
    try:
        os.kill(int(words[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _flock_held(stat: os.stat_result) -> bool | None:
    """Whether ``/proc/locks`` lists an flock on the file of ``stat`` (None: no table)."""
    try:
        table = _PROC_LOCKS.read_text("ascii", "replace")
    except OSError:
        return None
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        with contextlib.suppress(ValueError):
            at = fields.index("FLOCK")
            if len(fields) > at + 4 and fields[at + 4] == wanted:
                return True
    return False
