"""Test doubles shipped with the package: real logs wrapped to be slow or to fail on cue.

They wrap a real ``EventLog`` (memory, file or Kafka) and delegate everything except what they
are for, so tests exercise the real backend's behaviour.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

import anyio

from log import EventLog, Position, Record, StartAt
from log.base import identity_of
from log.closing import ClosesOnExit
from log.identity import LogIdentity


class _Wrapper(ClosesOnExit):
    """Delegates the whole ``EventLog`` contract to ``inner``."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        """The wrapped log's URL."""
        return self.inner.url

    async def append(self, key: str, payload: bytes) -> Position:
        """Append one record (through ``append_batch``, so doubles see every append)."""
        positions = await self.append_batch([(key, payload)])
        return positions[0]

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append records to the wrapped log."""
        return await self.inner.append_batch(records)

    def read(self, start: StartAt = "beginning", *, follow: bool = False) -> AsyncIterator[Record]:
        """Read the wrapped log."""
        return self.inner.read(start, follow=follow)

    async def end(self) -> Position:
        """The wrapped log's end."""
        return await self.inner.end()

    async def identity(self) -> LogIdentity | None:
        """The wrapped log's identity (None when it has none)."""
        return await identity_of(self.inner)

    async def pin(self, name: str, position: Position | None) -> None:
        """Pin on the wrapped log."""
        await self.inner.pin(name, position)

    async def close(self) -> None:
        """Close the wrapped log."""
        await self.inner.close()


class SlowLog(_Wrapper):
    """A real log whose appends are slow: each waits ``append_delay_s``, and while the log is
    held (``hold()`` ... ``release()``) appends wait for the release.

    Holding gives tests a deterministic way to make a publisher's queue fill up;
    ``await wait_blocked()`` returns once an append is waiting on the hold.
    """

    def __init__(self, inner: EventLog, *, append_delay_s: float = 0.0, held: bool = False) -> None:
        super().__init__(inner)
        if isinstance(append_delay_s, bool) or not append_delay_s >= 0:
            raise ValueError(f"append_delay_s: expected a number >= 0, got {append_delay_s!r}")
        self.append_delay_s = float(append_delay_s)
        self.append_calls = 0
        self.blocked_appends = 0
        self._released = anyio.Event()
        self._blocked = anyio.Event()
        if not held:
            self._released.set()

    @property
    def held(self) -> bool:
        """Whether appends are being held back now."""
        return not self._released.is_set()

    def hold(self) -> None:
        """Make later appends wait until ``release()``."""
        if not self.held:
            self._released = anyio.Event()

    def release(self) -> None:
        """Let held appends (and later ones) through."""
        self._released.set()

    async def wait_blocked(self) -> None:
        """Return once at least one append is waiting on the hold."""
        await self._blocked.wait()

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append after the delay and after any hold is released."""
        self.append_calls += 1
        if self.append_delay_s:
            await anyio.sleep(self.append_delay_s)
        if self.held:
            self.blocked_appends += 1
            self._blocked.set()
            await self._released.wait()
        return await self.inner.append_batch(records)


class FailingLog(_Wrapper):
    """A real log whose ``n``-th append call raises ``errors[n]`` (``None``: goes through).

    Calls past the end of ``errors`` go through; a failing call appends nothing.
    """

    def __init__(self, inner: EventLog, errors: Iterable[BaseException | None]) -> None:
        super().__init__(inner)
        self.errors = list(errors)
        self.append_calls = 0

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append, or raise the scripted error of this call."""
        call = self.append_calls
        self.append_calls += 1
        error = self.errors[call] if call < len(self.errors) else None
        if error is not None:
            raise error
        return await self.inner.append_batch(records)
