"""Replay progress: a rich progress bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType
from typing import Final, Self

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

logger = logging.getLogger(__name__)

_LOG_EVERY_S: Final = 5.0
_BAR_EVERY_RECORDS: Final = 1000


class ReplayProgress:
    """Reports how many of ``total_records`` a replay has read.

    ``terminal=None`` decides by whether stderr is a terminal.
    """

    def __init__(self, description: str, total_records: int, *, terminal: bool | None = None):
        self.description = description
        self.total_records = total_records
        self.done_records = 0
        use_bar = sys.stderr.isatty() if terminal is None else terminal
        self._bar: Progress | None = None
        if use_bar and total_records > 0:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                transient=True,
            )
        self._task = self._bar.add_task(description, total=total_records) if self._bar else None
        self._started_s = time.monotonic()
        self._logged_s = self._started_s

    def __enter__(self) -> Self:
        if self._bar is not None:
            self._bar.start()
        elif self.total_records:
            logger.info("%s: %d records to read", self.description, self.total_records)
        return self

    def advance(self) -> None:
        """One more record was read."""
        self.done_records += 1
        if self._bar is not None and self._task is not None:
            if self.done_records % _BAR_EVERY_RECORDS == 0:
                self._bar.update(self._task, completed=self.done_records)
            return
        now = time.monotonic()
        if now - self._logged_s >= _LOG_EVERY_S:
            self._logged_s = now
            logger.info(
                "%s: %d/%d records", self.description, self.done_records, self.total_records
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        elapsed_s = time.monotonic() - self._started_s
        if self.done_records:
            logger.info(
                "%s: read %d records in %.2f s", self.description, self.done_records, elapsed_s
            )
