"""A follower process for the restart test: restore, catch up, report, exit.

``python -m tests.consumers.follower_process LOG_DIR SNAP_DIR|- OUT_JSON``. With ``-`` it runs
without snapshots (a full replay). The report is written atomically at the very end, so a
process killed earlier leaves none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import orjson

from consumers import Follower, ReplicaSet, SnapshotStore, Stats
from log import open_log

SNAPSHOT_EVERY_BATCHES = 40


async def main(log_dir: str, snap_dir: str, out: str) -> None:
    """Restore (or replay) the views and write a JSON report to ``out``."""
    store = None if snap_dir == "-" else SnapshotStore(snap_dir, keep=2)
    log = await open_log(Path(log_dir).as_uri(), readonly=True)
    async with log:
        replicas = ReplicaSet()
        follower = Follower(
            log,
            [replicas, Stats(replicas)],
            snapshots=store,
            snapshot_every_batches=SNAPSHOT_EVERY_BATCHES,
        )
        restored = await follower.restore()
        report = {
            "digests": {s: replicas[s].digest_value() for s in replicas.sources()},
            "records_read": follower.metrics.records_read,
            "restored_generation": None if restored is None else restored.generation,
            "diverged": follower.diverged(),
        }
    tmp = anyio.Path(out + ".tmp")
    await tmp.write_bytes(orjson.dumps(report))
    os.replace(tmp, out)


if __name__ == "__main__":
    log_dir, snap_dir, out = sys.argv[1:4]
    anyio.run(main, log_dir, snap_dir, out)
