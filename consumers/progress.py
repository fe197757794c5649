"""How a follower reports replay progress: the ``ReplayProgress`` protocol and its default.

A follower tells its ``progress`` when a replay (``restore`` or ``catch_up``) starts, every
``ADVANCE_EVERY_RECORDS`` records, and when it ends. The default, ``LoggedProgress``, writes log
lines; a command line plugs in a terminal bar (``swa_es.cli.progress``).
"""

from __future__ import annotations

import logging
import time
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
            logger.info("%s: %d/%d records", self._description, done_records, self._total)

    def finished(self, done_records: int) -> None:
        """Log the count and the time it took."""
        if done_records:
            elapsed_s = time.monotonic() - self._started_s
            logger.info("%s: read %d records in %.2f s", self._description, done_records, elapsed_s)
