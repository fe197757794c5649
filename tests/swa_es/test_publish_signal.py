"""The encoder's wake-up socket as the append task waits on it (``swa_es.publish.signal``)."""

from __future__ import annotations

import asyncio
import socket

import anyio
import pytest

from swa_es.publish.signal import WakeSignal


async def test_a_watched_signal_wakes_the_waiter_once_per_consume() -> None:
    """Under asyncio one reader serves every wait: a byte wakes the waiter, the socket is
    emptied by the loop, and after ``consume()`` the next wait sleeps until the next byte."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    signal = WakeSignal(ours.fileno())
    signal.watch()
    try:
        theirs.send(b"\x01")
        with anyio.fail_after(5):
            await signal.wait()
        signal.consume()
        waiter = asyncio.ensure_future(signal.wait())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        theirs.send(b"\x01\x01")
        with anyio.fail_after(5):
            await waiter
        with pytest.raises(BlockingIOError):  # the loop emptied the socket
            ours.recv(16)
    finally:
        signal.close()
    # Closing stopped watching: there is no reader left to remove.
    assert not asyncio.get_running_loop().remove_reader(ours.fileno())
    ours.close()
    theirs.close()
