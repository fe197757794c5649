"""Waiting for the encoder thread's wake-up socket from the event loop.

The encoder thread writes a byte to a socket when records are ready (once per round, about once
a millisecond under load). Under asyncio the socket is watched for the publisher's whole life
(one ``add_reader``): each signal then costs the loop one callback that empties the socket and
wakes the waiter, rather than registering and unregistering the socket with the selector (two
system calls and their bookkeeping) for every wait. Under any other anyio backend each wait is
an ``anyio.wait_readable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import anyio

_READ_BYTES = 4096


def _drain(fd: int) -> None:
    """Empty the socket. A short read has emptied it (the thread writes a byte per round),
    which saves the call that would fail with EAGAIN."""
    with contextlib.suppress(BlockingIOError):
        while len(os.read(fd, _READ_BYTES)) == _READ_BYTES:
            pass


class WakeSignal:
    """The encoder's wake-up socket ``fd`` (non-blocking), as the append task waits on it.

    ``watch()`` (in the event loop, before the first wait) starts watching; ``wait()`` returns
    once a signal came since the last ``consume()``; ``consume()`` (just before taking the
    records) forgets the signals so far; ``close()`` stops watching.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signalled = False
        self._waiter: asyncio.Future[None] | None = None

    def watch(self) -> None:
        """Watch the socket for the publisher's life when the loop is asyncio's."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # another anyio backend: each wait polls the socket itself
        loop.add_reader(self._fd, self._on_readable)
        self._loop = loop

    def _on_readable(self) -> None:
        _drain(self._fd)
        self._signalled = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Return once a signal came since the last ``consume()`` (at once if one did)."""
        loop = self._loop
        if loop is None:
            await anyio.wait_readable(self._fd)
            return
        if self._signalled:
            return
        self._waiter = waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def consume(self) -> None:
        """Forget the signals so far (call just before taking what they announced: a record
        finished after that signals again)."""
        if self._loop is None:
            _drain(self._fd)
        self._signalled = False

    def close(self) -> None:
        """Stop watching the socket."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)
