"""``swa-es snapshot``: catch up on a log and write a snapshot of its views.

It restores what it can (the newest valid snapshot, else the whole log), catches up and writes a
fresh snapshot, then prints one JSON object: the snapshot written and every source's digest.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import orjson

from consumers import Follower, SnapshotInfo, SnapshotStore
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_OK
from swa_es.cli.progress import terminal_progress
from swa_es.service.log_access import open_reader
from swa_es.service.views import StandardViews


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotConfig:
    """``swa-es snapshot`` and ``swa-es restore`` (each field is a row of
    ``settings.SETTINGS``)."""

    log_url: str
    snapshot_dir: Path
    open_timeout_s: float


def add_parser(subparsers: Any) -> None:
    """Add ``snapshot`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        "snapshot",
        help="catch up on a log and write a snapshot of its views",
        description="Catch up on a log and write a snapshot of its views.",
        config_type=SnapshotConfig,
        run=run,
    )


def run(config: SnapshotConfig) -> int:
    """Run ``snapshot``, printing to stdout; the exit status."""
    return anyio.run(snapshot, config, sys.stdout, backend="asyncio")


def summary(
    action: str, info: SnapshotInfo | None, follower: Follower, views: StandardViews
) -> bytes:
    """The JSON line reporting a snapshot written or restored, and every source's digest."""
    body: dict[str, Any] = {
        "action": action,
        "snapshot": None if info is None else str(info.path),
        "snapshot_position": None if info is None else info.position.offsets,
        "position": follower.position.offsets,
        "records_replayed": follower.metrics.records_read,
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


async def snapshot(config: SnapshotConfig, out: TextIO) -> int:
    """Catch up (from the newest snapshot, if any) and write a new snapshot."""
    await anyio.Path(config.snapshot_dir).mkdir(parents=True, exist_ok=True)
    views = StandardViews.create()
    log = await open_reader(config.log_url, config.open_timeout_s)
    async with log:
        follower = Follower(
            log,
            views.all,
            snapshots=SnapshotStore(config.snapshot_dir),
            progress=terminal_progress(),
        )
        await follower.restore()
        info = await follower.snapshot()
    out.write(summary("snapshot", info, follower, views).decode())
    return EXIT_OK
