"""Replay progress for a command's follower: a rich progress bar on a terminal, else one line
every few seconds (through the command's own stderr lines, or the log)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from consumers.progress import LoggedProgress, ReplayProgress, ReplayState

LINE_EVERY_S = 5.0
"""Seconds between two progress lines when stderr is not a terminal."""


class ProgressBar:
    """A transient rich bar per replay (``ReplayProgress``); nothing for an empty replay."""

    def __init__(self) -> None:
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._logged = LoggedProgress()

    def started(self, description: str, total_records: int) -> None:
        """Show a bar for ``total_records`` (none when there is nothing to read)."""
        self._logged.started(description, total_records)
        if total_records <= 0:
            return
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=True,
        )
        self._task = self._bar.add_task(description, total=total_records)
        self._bar.start()

    def advanced(self, done_records: int) -> None:
        """Move the bar."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done_records)

    def finished(self, done_records: int) -> None:
        """Remove the bar; log the count and time."""
        if self._bar is not None:
            self._bar.stop()
        self._bar = self._task = None
        self._logged.finished(done_records)


class LineProgress:
    """Progress as lines told to ``say`` (a service's ``swa-es COMMAND: ...`` lines): the total
    when a replay begins, then at most one line every ``every_s`` seconds with the count, the
    rate and the time left (``ReplayState.text``); nothing for an empty replay (the service says
    how its replay ended)."""

    def __init__(
        self,
        say: Callable[[str], None],
        every_s: float = LINE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.say = say
        self.every_s = every_s
        self._clock = clock
        self._description = ""
        self._total = 0
        self._started_s = self._said_s = clock()

    def started(self, description: str, total_records: int) -> None:
        """Say the total."""
        self._description, self._total = description, total_records
        self._started_s = self._said_s = self._clock()
        if total_records > 0:
            self.say(f"{description}: replaying {total_records} records")

    def advanced(self, done_records: int) -> None:
        """Say the count, if ``every_s`` passed since the last line."""
        now = self._clock()
        if now - self._said_s >= self.every_s:
            self._said_s = now
            elapsed_s = now - self._started_s
            state = ReplayState(self._description, self._total, done_records, elapsed_s, True)
            self.say(state.text())

    def finished(self, done_records: int) -> None:
        """Nothing: the service says how the replay ended."""


def terminal_progress(say: Callable[[str], None] | None = None) -> ReplayProgress:
    """A bar when stderr is a terminal, else lines told to ``say`` (None: log lines)."""
    if sys.stderr.isatty():
        return ProgressBar()
    return LoggedProgress() if say is None else LineProgress(say)
