"""Bootstrap of a fresh follower from the Kafka snapshot topic, beside a replay of the same
state from the event log, in one run (the ratio), and the bytes a snapshot takes on the topic.

A history of about ``--blocks`` page-1 blocks (4 sources; batches of 4 stores of 16 chained
pages, as replica_bench's restore row), then ``--churn-batches`` batches of churn (16 random
events each: stores, SWA evictions and restores, removals; one scenario per value, default 0
and 50000: a grow-only log is replay's best case, a log with churn holds more than the state)
is appended to a fresh event topic; a follower catches
up and writes one snapshot to a fresh snapshot topic (its write time is reported); a tail of
``--tail-batches`` follows. Then, alternately, ``--runs`` times each:

- bootstrap: a follower with no local state opens the snapshot store, restores the newest
  snapshot (one scan of the topic, every chunk verified) and replays the tail;
- replay: a follower with no snapshots replays the whole event topic.

Both must end equal to every source's digest. Wall-clock seconds are the headline (the broker
runs on the same machine and its work is part of both); the process's CPU seconds are printed
beside them. ``bytes_per_block`` is the snapshot's stored bytes on the topic (keys, chunk
headers and the manifest record included) over the blocks it holds::

    .venv/bin/python bench/snapshot_bench.py --kafka 127.0.0.1:19092 [--blocks 1000000]
        [--tail-batches 100] [--runs 3] [--churn-batches 0,50000]
        [--json bench/results/snapshot_bench.json]
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import orjson
from machine_load import CpuTicks, machine_row
from replica_bench import Timing, _append_all, _sources, _stream

from consumers import Follower, ReplicaSet, SnapshotStorage, open_snapshot_store
from log import EventLog, open_log

BOOTSTRAP_TARGET = 5.0
"""The goal: a bootstrap from the snapshot topic at least this many times faster than a replay."""


async def _restored(
    log: EventLog, store: SnapshotStorage | None, expected: dict[str, str]
) -> tuple[Timing, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    replicas = ReplicaSet()
    follower = Follower(log, [replicas], snapshots=store)
    await follower.restore()
    timing = Timing(time.perf_counter() - wall, time.process_time() - cpu)
    for source, digest in expected.items():
        assert replicas[source].state_digest() == digest, source
    return timing, follower.metrics.records_read


async def scenario(args: argparse.Namespace, churn_batches: int) -> dict[str, Any]:
    """One history (grow-only, then ``churn_batches`` batches of churn), measured."""
    tag = uuid.uuid4().hex[:8]
    log_url = f"kafka://{args.kafka}/bench-snap-log-{tag}?partitions=1"
    store_url = f"kafka://{args.kafka}/bench-snap-store-{tag}?group=bench"
    sources = _sources(4, seed=2)
    history = []
    for index in range(max(1, args.blocks // 64)):
        src = sources[index % len(sources)]
        history.append(src.batch(src.events(4, store_pages=16, grow_only=True)))
    history += _stream(sources, churn_batches, 16, store_pages=2)
    result: dict[str, Any] = {
        "blocks": sum(s.blocks for s in sources),
        "churn_batches": churn_batches,
    }
    async with await open_log(log_url) as log:
        await _append_all(log, history)
        store = await open_snapshot_store(store_url)
        try:
            writer = Follower(log, [ReplicaSet()], snapshots=store)
            await writer.catch_up()
            wall = time.perf_counter()
            info = await writer.snapshot()
            result["snapshot_write_wall_s"] = time.perf_counter() - wall
        finally:
            await store.close()
        result["snapshot_stored_bytes"] = info.size_bytes
        result["bytes_per_block"] = info.size_bytes / result["blocks"]
        await _append_all(log, _stream(sources, args.tail_batches, 2, store_pages=2))
        expected = {s.source: s.digest.hexdigest() for s in sources}
        boots: list[Timing] = []
        replays: list[Timing] = []
        for _ in range(args.runs):
            wall, cpu = time.perf_counter(), time.process_time()
            fresh = await open_snapshot_store(store_url)
            try:
                timing, tail_read = await _restored(log, fresh, expected)
            finally:
                await fresh.close()
            boots.append(
                Timing(time.perf_counter() - wall, time.process_time() - cpu)
            )  # the store's open (topic checks) counts too
            timing, replay_read = await _restored(log, None, expected)
            replays.append(timing)
        boot = min(boots, key=lambda t: t.wall_s)
        replay = min(replays, key=lambda t: t.wall_s)
    result.update(
        {
            "tail_records_replayed_after_bootstrap": tail_read,
            "records_replayed_without_snapshot": replay_read,
            "bootstrap_wall_s": boot.wall_s,
            "bootstrap_cpu_s": boot.cpu_s,
            "replay_wall_s": replay.wall_s,
            "replay_cpu_s": replay.cpu_s,
            "replay_over_bootstrap_wall": replay.wall_s / boot.wall_s,
            "replay_over_bootstrap_cpu": replay.cpu_s / boot.cpu_s,
            "target_replay_over_bootstrap": BOOTSTRAP_TARGET,
            "runs": args.runs,
        }
    )
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    since = CpuTicks.now()
    results: dict[str, Any] = {}
    for churn in args.churn_batches:
        results[f"churn_{churn}"] = await scenario(args, churn)
    results["machine"] = machine_row(since)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", required=True, help="bootstrap host:port of a broker")
    parser.add_argument("--blocks", type=int, default=1_000_000)
    parser.add_argument("--tail-batches", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--churn-batches",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[0, 50_000],
        help="scenarios: batches of churn (16 random events each) after the grow-only history",
    )
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
