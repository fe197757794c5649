"""Waking a reader in another process than the writer when the log directory changes.

A ``readonly`` reader has no committer to wait on. Where the kernel offers inotify (Linux), it
watches the directory for writes to its files and for new files (a segment roll), so it looks
again as soon as the writer has written rather than at its next poll. The watch only says
*when* to look: what the reader may see is unchanged (whatever the writer has written, as
before). Elsewhere, or when no inotify instance can be had (the per-user limit), ``open_watch``
returns None and the reader polls as it always did; a watched reader still looks at least
every ``poll_interval_s``, for filesystems that report no changes (NFS, say).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_WATCHED = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO
_DRAIN_BYTES = 64 * 1024


class _Inotify:
    """The two libc calls (resolved once)."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self.init1 = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch = libc.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int


def _load() -> _Inotify | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return _Inotify(ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True))
    except (OSError, AttributeError):
        return None


_INOTIFY = _load()


class DirectoryWatch:
    """A non-blocking inotify descriptor that becomes readable when a file of one directory is
    written or created. ``drain`` before looking, so a change after the look wakes again."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def fileno(self) -> int:
        """The descriptor to wait on (``anyio.wait_readable``)."""
        if self._fd is None:
            raise ValueError("the directory watch is closed")
        return self._fd

    def drain(self) -> None:
        """Discard the changes reported so far."""
        fd = self.fileno()
        try:
            while len(os.read(fd, _DRAIN_BYTES)) == _DRAIN_BYTES:
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Release the descriptor (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def open_watch(directory: Path) -> DirectoryWatch | None:
    """A watch on ``directory``, or None where inotify is missing or refused (then poll)."""
    if _INOTIFY is None:
        return None
    fd = _INOTIFY.init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        logger.debug(
            "inotify_init1 failed (%s): polling %s", os.strerror(ctypes.get_errno()), directory
        )
        return None
    if _INOTIFY.add_watch(fd, os.fsencode(directory), _WATCHED) < 0:
        logger.debug(
            "inotify_add_watch failed (%s): polling %s", os.strerror(ctypes.get_errno()), directory
        )
        os.close(fd)
        return None
    return DirectoryWatch(fd)
