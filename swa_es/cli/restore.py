"""``swa-es restore``: load the newest valid snapshot, replay the tail, report what it rebuilt.

It prints one JSON object: the snapshot used and every source's digest (the same line as
``swa-es snapshot``).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import anyio

from consumers import Follower, SnapshotStore
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_OK
from swa_es.cli.progress import terminal_progress
from swa_es.cli.snapshot import SnapshotConfig, summary
from swa_es.service.log_access import open_reader
from swa_es.service.views import StandardViews


def add_parser(subparsers: Any) -> None:
    """Add ``restore`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        "restore",
        help="restore views from the newest snapshot plus the log tail",
        description="Restore views from the newest snapshot plus the log tail.",
        config_type=SnapshotConfig,
        run=run,
    )


def run(config: SnapshotConfig) -> int:
    """Run ``restore``, printing to stdout; the exit status."""
    return anyio.run(restore, config, sys.stdout, backend="asyncio")


async def restore(config: SnapshotConfig, out: TextIO) -> int:
    """Restore from the newest valid snapshot plus the tail and report it."""
    views = StandardViews.create()
    log = await open_reader(config.log_url, config.open_timeout_s)
    async with log:
        follower = Follower(
            log,
            views.all,
            snapshots=SnapshotStore(config.snapshot_dir),
            progress=terminal_progress(),
        )
        info = await follower.restore()
    out.write(summary("restore", info, follower, views).decode())
    return EXIT_OK
