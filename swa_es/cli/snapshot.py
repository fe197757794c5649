"""``swa-es snapshot`` and ``swa-es restore``: rebuild the views from a snapshot store and the log.

Both restore what they can (the newest valid snapshot, else the whole log) and catch up;
``snapshot`` then writes a fresh snapshot. ``restore`` only reads the store unless
``--write-snapshots`` (then it snapshots as a follower does while it replays, and pins the
log). Each prints one JSON object: the snapshot written or restored, the log positions that were
gone (retention), and every source's digest. The store is a directory or a ``kafka://``
snapshot topic (``--snapshots``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TextIO

import anyio
import orjson

from consumers import Follower, SnapshotInfo
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_OK
from swa_es.cli.progress import terminal_progress
from swa_es.cli.service_report import check_snapshot_directory
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import SNAPSHOTS, WRITE_SNAPSHOTS, LogAccess
from swa_es.options import REQUIRED, field_of, nested
from swa_es.service.log_access import open_reader, open_snapshots
from swa_es.service.views import StandardViews

Action = Literal["snapshot", "restore"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotConfig:
    """``swa-es snapshot`` and ``swa-es restore`` (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    snapshots: str = field_of(SNAPSHOTS, default=REQUIRED)


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreConfig(SnapshotConfig):
    """``swa-es restore``: ``snapshot``'s options, and whether to write snapshots meanwhile."""

    write_snapshots: bool = field_of(WRITE_SNAPSHOTS)


COMMANDS: dict[Action, Command] = {
    "snapshot": Command("snapshot", SnapshotConfig, positional=("log",)),
    "restore": Command("restore", RestoreConfig, positional=("log",)),
}


_HELP: dict[Action, str] = {
    "snapshot": "catch up on a log and write a snapshot of its views",
    "restore": "restore views from the newest snapshot plus the log tail (read-only)",
}


COMMAND = COMMANDS["snapshot"]


def add_parser(subparsers: Any, action: Action = "snapshot") -> None:
    """Add ``snapshot`` (or ``restore``) to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMANDS[action],
        help=_HELP[action],
        description=_HELP[action][0].upper() + _HELP[action][1:] + ".",
        run=partial(run, action=action),
    )


def run(config: SnapshotConfig, action: Action = "snapshot") -> int:
    """Run ``snapshot`` (or ``restore``), printing to stdout; the exit status."""
    return anyio.run(rebuild, config, sys.stdout, action, backend="asyncio")


def summary(
    action: str, info: SnapshotInfo | None, follower: Follower, views: StandardViews
) -> bytes:
    """The JSON line reporting a snapshot written or restored, and every source's digest."""
    body: dict[str, Any] = {
        "action": action,
        "snapshot": None if info is None else info.where,
        "snapshot_position": None if info is None else info.position.offsets,
        "position": follower.position.offsets,
        "records_replayed": follower.metrics.records_read,
        "lost_history": {
            p: {"first": first, "end": end} for p, (first, end) in follower.lost_history.items()
        },
        "sources": {
            source: {
                "digest": views.replicas[source].state_digest(),
                "diverged": views.replicas[source].diverged,
                "blocks": len(views.replicas[source]),
            }
            for source in views.replicas.sources()
        },
    }
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS) + b"\n"


async def rebuild(config: SnapshotConfig, out: TextIO, action: Action = "snapshot") -> int:
    """Restore (newest snapshot + tail, else the whole log); for ``snapshot`` write a new one."""
    writes = action == "snapshot" or (isinstance(config, RestoreConfig) and config.write_snapshots)
    if writes:
        check_snapshot_directory(config.snapshots)
    views = StandardViews.create()
    log = await open_reader(config.log.url, config.log.open_timeout_s)
    async with log:
        store = await open_snapshots(config.snapshots, config.log.open_timeout_s)
        try:
            follower = Follower(
                log,
                views.all,
                snapshots=store,
                progress=terminal_progress(),
                write_snapshots=writes,
            )
            info = await follower.restore()
            if action == "snapshot":
                info = await follower.snapshot()
        finally:
            await store.close()
    out.write(summary(action, info, follower, views).decode())
    return EXIT_OK
