"""Full disks for the FileLog tests: a real size-limited tmpfs, or a byte budget at ``os.write``.

``tmpfs_mount`` mounts a small tmpfs (root only; a sandbox may refuse it). ``ByteBudgetOS``
stands in for the ``os`` module inside ``log.file.segment`` (the writer's OS-call boundary):
writes spend a byte budget and, once it is spent, store what fits and then fail with ENOSPC,
as the kernel does; ``ftruncate`` gives bytes back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@contextlib.contextmanager
def tmpfs_mount(mount_point: Path, size_bytes: int) -> Iterator[str | None]:
    """Mount a tmpfs of ``size_bytes`` at ``mount_point``; yields None (and mounts nothing)
    with the reason as a string when this machine does not allow it."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield "not root: cannot mount a tmpfs"
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0750", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        yield f"mount -t tmpfs refused: {done.stderr.strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


class ByteBudgetOS:
    """The ``os`` module, but ``write`` spends ``free_bytes`` and fails with ENOSPC once it is
    spent (after a short write of what fits). With ``creates_fail_when_full`` creating a new
    file fails too once nothing is free. ``fdatasync_error`` makes every fdatasync fail."""

    def __init__(self, real: ModuleType, free_bytes: int, *, creates_fail_when_full: bool) -> None:
        self._real = real
        self.free_bytes = free_bytes
        self.creates_fail_when_full = creates_fail_when_full
        self.fdatasync_error: int | None = None
        self.enospc_raised = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """Write what fits in the budget; ENOSPC when nothing does."""
        if self.free_bytes <= 0 and len(data) > 0:
            self.enospc_raised += 1
            raise _no_space()
        written = int(self._real.write(fd, data[: self.free_bytes]))
        self.free_bytes -= written
        return written

    def ftruncate(self, fd: int, length: int) -> None:
        """Truncate, returning the cut bytes to the budget."""
        before = int(self._real.fstat(fd).st_size)
        self._real.ftruncate(fd, length)
        self.free_bytes += max(0, before - length)

    def open(self, path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        """Open; creating a new file fails with ENOSPC when full and so configured."""
        creating = flags & self._real.O_CREAT and not self._real.path.exists(path)
        if creating and self.creates_fail_when_full and self.free_bytes <= 0:
            self.enospc_raised += 1
            raise _no_space()
        return int(self._real.open(path, flags, mode, **kwargs))

    def fdatasync(self, fd: int) -> None:
        """fdatasync, or the configured error."""
        if self.fdatasync_error is not None:
            raise OSError(self.fdatasync_error, os.strerror(self.fdatasync_error))
        self._real.fdatasync(fd)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
