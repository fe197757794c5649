"""The command line's replay progress: a rich bar on a terminal, log lines otherwise."""

from __future__ import annotations

import logging

import pytest

from consumers.progress import LoggedProgress
from swa_es.cli.progress import ProgressBar, terminal_progress


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
