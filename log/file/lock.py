"""The single-writer lock of a log directory: an ``flock`` on ``<dir>/LOCK``.

``flock`` locks belong to the open file, so a second writer is refused whether it lives in
another process or in this one; the kernel drops the lock when the holder dies. Readers
never take it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from log.errors import LogLockedError

LOCK_NAME = "LOCK"


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
