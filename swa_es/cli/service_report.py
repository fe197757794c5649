"""What a service (``serve``, ``follow``, ``bridge``) tells its operator on stderr, one line
each: on start what it listens on and what it reads and writes, milestones (``follow``: restored,
and ready when its ``/readyz`` turns 200), and one summary line on exit (why it stopped, after
how long, its counts); and the exit status a stop maps to (SIGINT: 130, like every command;
SIGTERM or its own limit: 0). And the checks, before a command starts, of the paths it will
write (``--status-file``, a snapshot directory), so that a bad one is an error naming the flag
and the path at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from consumers.snapshots.opening import directory_of, is_kafka_url
from swa_es.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK
from swa_es.service.errors import ServicePathError
from swa_es.service.signals import Stop


class ServiceReport:
    """The stderr lines of one service run (``swa-es COMMAND: ...``)."""

    def __init__(self, command: str, stream: TextIO | None = None) -> None:
        self.prog = f"swa-es {command}"
        self.stop = Stop()
        self.counts: Callable[[], str] = lambda: "nothing done yet"
        """What the summary line counts (the service sets it once it exists)."""
        self._stream = stream
        self._started = time.monotonic()
        self._summarized = False
        self._started_line = False

    def say(self, text: str) -> None:
        """Write one line ``swa-es COMMAND: text``."""
        stream = sys.stderr if self._stream is None else self._stream
        stream.write(f"{self.prog}: {text}\n")
        stream.flush()

    def elapsed_s(self) -> float:
        """Seconds since the report began."""
        return time.monotonic() - self._started

    def stopped(self, *, limit_reason: str) -> int:
        """The summary line (``limit_reason``: why it stopped when no signal did) and the exit
        status."""
        reason = limit_reason if self.stop.signal is None else self.stop.signal.name
        self._summary(f"stopped ({reason})")
        return EXIT_INTERRUPTED if self.stop.interrupted else EXIT_OK

    @contextmanager
    def failing(self) -> Iterator[None]:
        """Within it, an error after the start line still gets its summary line (the counts as
        far as they got) before it propagates (the error line follows it)."""
        try:
            yield
        except BaseException:
            if self._started_line and not self._summarized:
                self._summary("failed")
            raise

    def started(self, parts: list[str]) -> None:
        """The start line: ``parts`` joined."""
        self._started_line = True
        self.say("; ".join(parts))

    def _summary(self, how: str) -> None:
        self._summarized = True
        self.say(f"{how} after {self.elapsed_s():.1f} s: {self.counts()}")


def check_status_file(path: Path | None) -> None:
    """Before a service starts: a ``--status-file`` it could not write (its directory missing
    or not writable, or the path a directory) is an error naming the flag and the path."""
    if path is None:
        return
    directory = path.parent
    if path.is_dir():
        reason = "is a directory"
    elif not directory.is_dir():
        reason = f"directory {directory} does not exist"
    elif not os.access(directory, os.W_OK | os.X_OK):
        reason = f"directory {directory} is not writable"
    else:
        return
    raise ServicePathError(f"--status-file {path}", reason)


def check_snapshot_directory(store: str | None) -> None:
    """Before a command that writes snapshots starts: a directory store (``--snapshots``) that
    is a file, or that could not be created, is an error naming the flag and the store (a
    ``kafka://`` store is checked when opened)."""
    if store is None or is_kafka_url(store):
        return
    directory = directory_of(store)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        reason = f"{existing} is not a directory"
    elif not os.access(existing, os.W_OK | os.X_OK):
        reason = f"directory {existing} is not writable"
    else:
        return
    raise ServicePathError(f"--snapshots {store}", reason)


def listening(name: str, url: str | None) -> list[str]:
    """``["NAME on URL"]``, or nothing when that server is off."""
    return [] if url is None else [f"{name} on {url}"]
