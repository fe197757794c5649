"""Restoring a follower from a snapshot against replaying a FileLog that holds exactly the same
blocks, into the views every command builds (replicas, prefix index, stats), in one run.

For each page size asked (``--page-sizes``, default 1 and 16), a fresh FileLog gets a grow-only
history of ``--blocks`` live blocks (4 sources; batches of 4 stores of 16 chained pages, each
block stored once, so the log holds exactly the blocks the state holds). A follower replays it
and writes one snapshot to a snapshot directory. Then, alternately, ``--runs`` times each, a
fresh follower with fresh ``StandardViews``:

- replay: no snapshots; replays the whole log natively (the fast lane, the holder index built
  once at the end);
- restore: loads the newest snapshot (every checksum verified, every array checked) and replays
  the tail, which is empty.

Both must end on every source's digest. Best of the runs, wall-clock seconds (process CPU
seconds beside them); the ratio is replay over restore::

    .venv/bin/python bench/restore_bench.py [--blocks 1000000] [--page-sizes 1,16]
        [--runs 3] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
from machine_load import CpuTicks, machine_row
from replica_bench import Timing, _append_all, _sources

from consumers import Follower, SnapshotStore
from log import EventLog, open_log
from swa_es.service.views import StandardViews

SOURCES = 4
STORES_PER_BATCH = 4
PAGES_PER_STORE = 16
RESTORE_TARGET = 10.0
"""The goal: restoring N blocks at least this many times faster than replaying them."""


async def _timed(
    log: EventLog, store: SnapshotStore | None, expected: dict[str, str]
) -> tuple[Timing, int]:
    """A fresh follower's ``restore()`` (from ``store``, or a whole replay without one)."""
    views = StandardViews.create()
    follower = Follower(
        log, views.all, snapshots=store, snapshot_every_batches=1 << 40, snapshot_every_s=1e9
    )
    wall, cpu = time.perf_counter(), time.process_time()
    await follower.restore()
    timing = Timing(time.perf_counter() - wall, time.process_time() - cpu)
    for source, digest in expected.items():
        assert views.replicas[source].state_digest() == digest, source
    return timing, follower.metrics.records_read


async def scenario(work: Path, blocks: int, page_size: int, runs: int) -> dict[str, Any]:
    """One page size: the log, the snapshot, and the alternated timings."""
    sources = _sources(SOURCES, seed=2, page_size=page_size)
    history = []
    for index in range(max(1, blocks // (STORES_PER_BATCH * PAGES_PER_STORE))):
        src = sources[index % len(sources)]
        events = src.events(STORES_PER_BATCH, store_pages=PAGES_PER_STORE, grow_only=True)
        history.append(src.batch(events))
    expected = {s.source: s.digest.hexdigest() for s in sources}
    result: dict[str, Any] = {"page_size": page_size, "blocks": sum(s.blocks for s in sources)}
    async with await open_log((work / "log").as_uri(), fsync="never") as log:
        await _append_all(log, history)
        store = SnapshotStore(work / "snapshots")
        views = StandardViews.create()
        writer = Follower(log, views.all, snapshots=store)
        await writer.catch_up()
        wall = time.perf_counter()
        info = await writer.snapshot()
        result["snapshot_write_wall_s"] = time.perf_counter() - wall
        result["snapshot_bytes_per_block"] = info.size_bytes / result["blocks"]
        replays: list[Timing] = []
        restores: list[Timing] = []
        for _ in range(runs):
            timing, replayed = await _timed(log, None, expected)
            replays.append(timing)
            timing, tail = await _timed(log, store, expected)
            restores.append(timing)
    replay = min(replays, key=lambda t: t.wall_s)
    restore = min(restores, key=lambda t: t.wall_s)
    result.update(
        {
            "records_replayed": replayed,
            "tail_records_after_restore": tail,
            "replay_wall_s": replay.wall_s,
            "replay_cpu_s": replay.cpu_s,
            "restore_wall_s": restore.wall_s,
            "restore_cpu_s": restore.cpu_s,
            "replay_over_restore_wall": replay.wall_s / restore.wall_s,
            "replay_over_restore_cpu": replay.cpu_s / restore.cpu_s,
            "target_replay_over_restore": RESTORE_TARGET,
            "runs": runs,
        }
    )
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every page size asked, then the machine row."""
    since = CpuTicks.now()
    results: dict[str, Any] = {}
    for page_size in args.page_sizes:
        with tempfile.TemporaryDirectory(prefix="restore-bench-") as work:
            results[f"page_{page_size}"] = await scenario(
                Path(work), args.blocks, page_size, args.runs
            )
    results["machine"] = machine_row(since)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=1_000_000)
    parser.add_argument(
        "--page-sizes",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[1, 16],
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = anyio.run(run, args, backend="asyncio")
    for section, values in results.items():
        print(section, orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
