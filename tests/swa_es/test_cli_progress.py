"""The command line's replay progress: a rich bar on a terminal, log lines otherwise."""

from __future__ import annotations

import logging

import pytest

from consumers.progress import LoggedProgress
from swa_es.cli.progress import LineProgress, ProgressBar, terminal_progress


def test_without_a_terminal_progress_is_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """stderr is not a terminal under pytest: the command gets LoggedProgress, which logs."""
    progress = terminal_progress()
    assert isinstance(progress, LoggedProgress)
    with caplog.at_level(logging.INFO, logger="consumers.progress"):
        progress.started("restore", 10)
        progress.finished(10)
    assert "restore: 10 records to read" in caplog.text
    assert "restore: read 10 records" in caplog.text


def test_the_bar_follows_a_replay_and_goes_away() -> None:
    """The bar starts with the total, moves, and is removed when the replay ends."""
    bar = ProgressBar()
    bar.started("restore", 3000)
    bar.advanced(1000)
    assert bar._bar is not None and bar._bar.tasks[0].completed == 1000  # the rich task
    bar.finished(3000)
    assert bar._bar is None
    bar.started("catch-up", 0)  # nothing to read: no bar
    assert bar._bar is None
    bar.finished(0)


def test_without_a_terminal_a_service_says_a_line_every_few_seconds() -> None:
    """Given a service's ``say``: the total when a replay begins, then at most one line per
    ``every_s`` with the count, the rate and the time left; nothing for an empty replay."""
    said: list[str] = []
    now = [100.0]
    progress = terminal_progress(said.append)
    assert isinstance(progress, LineProgress)
    lines = LineProgress(said.append, every_s=5.0, clock=lambda: now[0])
    lines.started("restore", 50_000)
    now[0] += 1.0
    lines.advanced(10_000)  # within 5 s of the last line: nothing
    now[0] += 4.0
    lines.advanced(20_000)
    now[0] += 1.0
    lines.advanced(24_000)
    lines.finished(50_000)
    lines.started("catch-up", 0)
    assert said == [
        "restore: replaying 50000 records",
        "restore: 20000/50000 records, 4000 records/s, about 7.5 s to go",
    ]
