"""``swa-es snapshot`` and ``swa-es restore``: one-shot helpers around a follower's snapshots.

``snapshot`` restores what it can, catches up on the log and writes a fresh snapshot;
``restore`` loads the newest valid snapshot, replays the tail and reports what it rebuilt. Both
print one JSON object per line: the snapshot used or written, and every source's digest.
"""

from __future__ import annotations

from typing import Any, TextIO

import anyio
import orjson

from consumers import Follower, SnapshotInfo, SnapshotStore
from swa_es.cli.config import SnapshotConfig
from swa_es.service.log_access import open_reader
from swa_es.service.views import StandardViews


def _summary(
    action: str, info: SnapshotInfo | None, follower: Follower, views: StandardViews
) -> dict[str, Any]:
    return {
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


async def run_snapshot(config: SnapshotConfig, out: TextIO) -> int:
    """Catch up (from the newest snapshot, if any) and write a new snapshot."""
    await anyio.Path(config.snapshot_dir).mkdir(parents=True, exist_ok=True)
    views = StandardViews.create()
    log = await open_reader(config.log_url, config.open_timeout_s)
    async with log:
        follower = Follower(
            log, views.all, snapshots=SnapshotStore(config.snapshot_dir), progress=False
        )
        await follower.restore()
        info = await follower.snapshot()
    out.write(
        orjson.dumps(
            _summary("snapshot", info, follower, views), option=orjson.OPT_NON_STR_KEYS
        ).decode()
        + "\n"
    )
    return 0


async def run_restore(config: SnapshotConfig, out: TextIO) -> int:
    """Restore from the newest valid snapshot plus the tail and report it."""
    views = StandardViews.create()
    log = await open_reader(config.log_url, config.open_timeout_s)
    async with log:
        follower = Follower(
            log, views.all, snapshots=SnapshotStore(config.snapshot_dir), progress=False
        )
        info = await follower.restore()
    out.write(
        orjson.dumps(
            _summary("restore", info, follower, views), option=orjson.OPT_NON_STR_KEYS
        ).decode()
        + "\n"
    )
    return 0
