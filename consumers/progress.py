"""How a follower reports replay progress: the ``ReplayProgress`` protocol and its default.

A follower tells its ``progress`` when a replay (``restore`` or ``catch_up``) starts, every
``ADVANCE_EVERY_RECORDS`` records, and when it ends. The default, ``LoggedProgress``, writes log
lines; a command line plugs in a terminal bar (``swa_es.cli.progress``). ``ReplayTracker`` sits
in front of either and remembers where the replay stands (``ReplayState``: records done and to
go, rate, time left), which readiness and the ``swa_es_recovery_*`` metrics read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

logger = logging.getLogger(__name__)

ADVANCE_EVERY_RECORDS: Final = 1000
"""How often (in records read) a replay calls ``advanced``."""


class ReplayProgress(Protocol):
    """Told how a replay advances; called from the follower's task, so it must not block."""

    def started(self, description: str, total_records: int) -> None:
        """A replay of about ``total_records`` records (to the log's end taken now) begins."""
        ...

    def advanced(self, done_records: int) -> None:
        """``done_records`` records of this replay have been read."""
        ...

    def finished(self, done_records: int) -> None:
        """The replay ended (also on an error) after ``done_records`` records."""
        ...


class LoggedProgress:
    """Progress as log lines: the total at the start, then at most one line every ``every_s``
    seconds, and the count and time at the end."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._description = ""
        self._total = 0
        self._started_s = self._logged_s = time.monotonic()

    def started(self, description: str, total_records: int) -> None:
        """Log the total."""
        self._description, self._total = description, total_records
        self._started_s = self._logged_s = time.monotonic()
        if total_records:
            logger.info("%s: %d records to read", description, total_records)

    def advanced(self, done_records: int) -> None:
        """Log the count, if ``every_s`` passed since the last line."""
        now = time.monotonic()
        if now - self._logged_s >= self.every_s:
            self._logged_s = now
            elapsed_s = now - self._started_s
            state = ReplayState(self._description, self._total, done_records, elapsed_s, True)
            logger.info("%s", state.text())

    def finished(self, done_records: int) -> None:
        """Log the count and the time it took."""
        if done_records:
            elapsed_s = time.monotonic() - self._started_s
            logger.info("%s: read %d records in %.2f s", self._description, done_records, elapsed_s)


@dataclass(frozen=True, slots=True)
class ReplayState:
    """Where one replay stands: ``done_records`` of about ``total_records`` read in
    ``elapsed_s`` seconds; ``active`` while it runs (False: the last replay, ended)."""

    description: str
    total_records: int
    done_records: int
    elapsed_s: float
    active: bool

    @property
    def to_go_records(self) -> int:
        """Records left to read (0 once ended; the total is the log's end when it began)."""
        return max(0, self.total_records - self.done_records) if self.active else 0

    @property
    def rate_records_s(self) -> float | None:
        """Records read per second so far (None: nothing read yet, or no time measured)."""
        if self.done_records <= 0 or self.elapsed_s <= 0:
            return None
        return self.done_records / self.elapsed_s

    def eta_s(self, to_go_records: int | None = None) -> float | None:
        """Seconds left at the rate so far for ``to_go_records`` (default: this replay's);
        0 with nothing to go, None with no rate yet."""
        to_go = self.to_go_records if to_go_records is None else to_go_records
        if to_go <= 0:
            return 0.0
        rate = self.rate_records_s
        return None if rate is None else to_go / rate

    def text(self) -> str:
        """One line: ``restore: 12000/50000 records, 24000 records/s, about 1.6 s to go``."""
        line = f"{self.description}: {self.done_records}/{self.total_records} records"
        rate, eta = self.rate_records_s, self.eta_s()
        if rate is not None:
            line += f", {rate:.0f} records/s"
        if eta is not None and self.active:
            line += f", about {eta:.1f} s to go"
        return line


class ReplayTracker:
    """A ``ReplayProgress`` that remembers where the current (or last) replay stands and
    passes every call on to ``inner`` (the bar or the log lines a command shows)."""

    def __init__(
        self, inner: ReplayProgress | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inner = inner
        self._clock = clock
        self._description = ""
        self._total = self._done = 0
        self._started_s = self._ended_s = 0.0
        self._active = False
        self.replays = 0
        """Replays begun so far."""

    def started(self, description: str, total_records: int) -> None:
        """A replay begins: remember its total and when."""
        self._description, self._total, self._done = description, total_records, 0
        self._started_s = self._clock()
        self._active = True
        self.replays += 1
        if self.inner is not None:
            self.inner.started(description, total_records)

    def advanced(self, done_records: int) -> None:
        """Remember the count."""
        self._done = done_records
        if self.inner is not None:
            self.inner.advanced(done_records)

    def finished(self, done_records: int) -> None:
        """The replay ended: remember its count and time."""
        self._done, self._active = done_records, False
        self._ended_s = self._clock()
        if self.inner is not None:
            self.inner.finished(done_records)

    def state(self) -> ReplayState | None:
        """The current replay, or the last one ended (None: none began)."""
        if not self.replays:
            return None
        until = self._clock() if self._active else self._ended_s
        return ReplayState(
            self._description, self._total, self._done, until - self._started_s, self._active
        )
