"""Replay progress on a terminal: a rich progress bar a command plugs into its follower."""

from __future__ import annotations

import sys

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from consumers.progress import LoggedProgress, ReplayProgress


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


def terminal_progress() -> ReplayProgress:
    """A bar when stderr is a terminal, else log lines."""
    return ProgressBar() if sys.stderr.isatty() else LoggedProgress()
