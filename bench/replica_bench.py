"""Benchmarks of the consumers, each measured against its target in one run, as ratios.

- replay: events/s (and blocks/s) a ``Follower`` applies into a ``ReplicaSet`` from a FileLog,
  decoding included; decode alone and apply alone are shown beside it;
- restore: a snapshot of about ``--blocks`` blocks plus a ``--tail-batches`` tail, against a
  full replay of the same log from the beginning;
- memory: bytes per replica block (tracemalloc), page sizes 1 and 16;
- lag: publish -> apply p50/p99 at ``--rate`` events/s through ``swa_es.Publisher`` (a synthetic
  cache stands in for the tree) into a FileLog, and into Kafka with ``--kafka host:port``.

The stream is synthetic: per source, branches of pages from the root, grown, tombstoned,
revived and trimmed at random, with real chained block hashes::

    .venv/bin/python bench/replica_bench.py [--blocks 1000000] [--tail-batches 10000]
        [--replay-events 300000] [--rate 50000] [--low-rate 5000] [--lag-s 5]
        [--kafka host:port] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    StateDigest,
    block_hashes_of,
    chain_page_digests,
    decode_batch,
    encode_batch,
)
from consumers import Follower, ReplicaSet, SnapshotStore
from log import EventLog, open_log
from swa_es import Backpressure, Publisher

TARGETS = {
    "replay_events_per_s": 500_000.0,
    "restore_speedup": 20.0,
    "restore_s": 1.0,
    "bytes_per_block": 200.0,
    "lag_p99_ms_file": 5.0,
    "lag_p99_ms_kafka": 25.0,
}


# --- a synthetic source ---------------------------------------------------------------------


@dataclass
class _Segment:
    hashes: list[int]
    tip_digest: bytes
    resident: bool = True


@dataclass
class SyntheticSource:
    """Events of one source: branches from the root, each a stack of stored segments."""

    source: str
    rng: random.Random
    page_size: int = 1
    branches: list[list[_Segment]] = field(default_factory=list)
    digest: StateDigest = field(default_factory=StateDigest)
    blocks: int = 0
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex)
    seq: int = -1
    _next_root_token: int = 0

    def _store(self, pages: int) -> Event:
        if self.branches and self.rng.random() < 0.7:
            branch = self.rng.choice(self.branches)
        else:
            branch = []
            self.branches.append(branch)
        tokens = [self.rng.randrange(1 << 16) for _ in range(pages * self.page_size)]
        if not branch:
            tokens[0] = self._next_root_token  # distinct first page per branch: no sharing
            self._next_root_token += 1
        prior = branch[-1].tip_digest if branch else b""
        parent = branch[-1].hashes[-1] if branch else None
        digests = chain_page_digests(prior, tokens, self.page_size)
        hashes = block_hashes_of(digests)
        previous = parent
        for block_hash in hashes:
            self.digest.add(block_hash, previous, True)
            previous = block_hash
        branch.append(_Segment(hashes, digests[-1]))
        self.blocks += len(hashes)
        return BlockStored(tuple(hashes), parent, tuple(tokens), self.page_size)

    def _parent_of(self, branch: list[_Segment], index: int, offset: int) -> int | None:
        if offset:
            return branch[index].hashes[offset - 1]
        return branch[index - 1].hashes[-1] if index else None

    def _flip(self) -> Event | None:
        branch = self.rng.choice(self.branches)
        index = self.rng.randrange(len(branch))
        segment = branch[index]
        segment.resident = not segment.resident
        for offset, block_hash in enumerate(segment.hashes):
            parent = self._parent_of(branch, index, offset)
            self.digest.set_residency(block_hash, parent, segment.resident)
        hashes = tuple(segment.hashes)
        return BlockSWARestored(hashes) if segment.resident else BlockSWAEvicted(hashes)

    def _trim(self) -> Event | None:
        branch = self.rng.choice(self.branches)
        if len(branch) < 2:
            return None
        index = len(branch) - 1
        segment = branch.pop()
        for offset, block_hash in enumerate(segment.hashes):
            parent = self._parent_of([*branch, segment], index, offset)
            self.digest.remove(block_hash, parent, segment.resident)
        self.blocks -= len(segment.hashes)
        return BlockRemoved(tuple(segment.hashes))

    def events(self, count: int, *, store_pages: int, grow_only: bool = False) -> list[Event]:
        """``count`` events: mostly stores, with tombstones, revivals and removals mixed in."""
        out: list[Event] = []
        while len(out) < count:
            roll = 0.0 if grow_only or not self.branches else self.rng.random()
            made = (
                self._store(store_pages)
                if roll < 0.6
                else self._flip()
                if roll < 0.85
                else self._trim()
            )
            if made is not None:
                out.append(made)
        return out

    def batch(self, events: list[Event], *, with_digest: bool = False) -> EventBatch:
        """The next batch of this source (the first one opens the epoch)."""
        self.seq += 1
        meta = None
        if self.seq == 0:
            events = [AllBlocksCleared(), *events]
            meta = BatchMeta(self.page_size, 4, digest_alg=DIGEST_ALGORITHM)
        digest = self.digest.hexdigest() if with_digest else None
        return EventBatch(
            self.source, self.epoch, self.seq, time.time(), tuple(events), digest, meta
        )


def _sources(count: int, seed: int, page_size: int = 1) -> list[SyntheticSource]:
    return [
        SyntheticSource(f"worker-{i}", random.Random(seed + i), page_size) for i in range(count)
    ]


async def _append_all(log: EventLog, batches: list[EventBatch], chunk: int = 500) -> None:
    for start in range(0, len(batches), chunk):
        part = batches[start : start + chunk]
        await log.append_batch([(b.source, encode_batch(b)) for b in part])


# --- replay -----------------------------------------------------------------------------------


def _stream(
    sources: list[SyntheticSource], batches: int, events_per_batch: int, store_pages: int
) -> list[EventBatch]:
    out = []
    for index in range(batches):
        src = sources[index % len(sources)]
        events = src.events(events_per_batch, store_pages=store_pages)
        out.append(src.batch(events, with_digest=src.seq % 64 == 63))
    return out


async def bench_replay(work: Path, total_events: int) -> dict[str, Any]:
    """events/s of Follower.catch_up into a ReplicaSet from a FileLog, decode and apply apart."""
    events_per_batch = 16
    sources = _sources(4, seed=1)
    batches = _stream(sources, total_events // events_per_batch, events_per_batch, store_pages=2)
    payloads = [encode_batch(b) for b in batches]
    events = sum(len(b.events) for b in batches)
    async with await open_log((work / "replay-log").as_uri(), fsync="never") as log:
        await _append_all(log, batches)
        replicas = ReplicaSet()
        follower = Follower(log, [replicas], progress=False)
        started = time.perf_counter()
        await follower.catch_up()
        follow_s = time.perf_counter() - started
    assert all(replicas[s.source].state_digest() == s.digest.hexdigest() for s in sources)
    decode_s = _timed(lambda: [decode_batch(p) for p in payloads])
    fresh = ReplicaSet()

    def apply_all() -> None:
        for batch in batches:
            fresh.apply(batch)

    apply_s = _timed(apply_all)
    blocks = sum(
        len(e.block_hashes) for b in batches for e in b.events if hasattr(e, "block_hashes")
    )
    return {
        "events": events,
        "blocks_touched": blocks,
        "replay_events_per_s": events / follow_s,
        "replay_blocks_per_s": blocks / follow_s,
        "decode_only_events_per_s": events / decode_s,
        "apply_only_events_per_s": events / apply_s,
    }


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


# --- restore ----------------------------------------------------------------------------------


async def _timed_restore(log: EventLog, store: SnapshotStore | None) -> tuple[float, ReplicaSet]:
    replicas = ReplicaSet()
    # no periodic snapshots during the timed tail: the full replay (no store) writes none either
    follower = Follower(
        log,
        [replicas],
        snapshots=store,
        snapshot_every_batches=1 << 40,
        snapshot_every_s=1e9,
        progress=False,
    )
    started = time.perf_counter()
    await follower.restore()
    return time.perf_counter() - started, replicas


async def bench_restore(work: Path, blocks: int, tail_batches: int) -> dict[str, Any]:
    """A snapshot of ~``blocks`` blocks + a tail of ``tail_batches``, against a full replay."""
    sources = _sources(4, seed=2)
    history: list[EventBatch] = []
    per_batch_blocks = 4 * 16
    for index in range(max(1, blocks // per_batch_blocks)):
        src = sources[index % len(sources)]
        history.append(src.batch(src.events(4, store_pages=16, grow_only=True)))
    async with await open_log((work / "restore-log").as_uri(), fsync="never") as log:
        await _append_all(log, history)
        store = SnapshotStore(work / "restore-snap")
        writer = Follower(log, [ReplicaSet()], snapshots=store, progress=False)
        await writer.catch_up()
        snapshot_started = time.perf_counter()
        info = await writer.snapshot()
        snapshot_s = time.perf_counter() - snapshot_started
        held = sum(s.blocks for s in sources)
        await _append_all(log, _stream(sources, tail_batches, 2, store_pages=2))
        full_s, full = await _timed_restore(log, None)
        restore_s, restored = await _timed_restore(log, store)
    for src in sources:
        assert full[src.source].state_digest() == src.digest.hexdigest()
        assert restored[src.source].state_digest() == src.digest.hexdigest()
    return {
        "snapshot_blocks": held,
        "snapshot_bytes": info.size_bytes,
        "snapshot_write_s": snapshot_s,
        "tail_batches": tail_batches,
        "full_replay_s": full_s,
        "restore_s": restore_s,
        "restore_speedup": full_s / restore_s,
    }


# --- memory -----------------------------------------------------------------------------------


def bench_memory(blocks: int) -> dict[str, Any]:
    """tracemalloc bytes per block of a ReplicaSet, page sizes 1 and 16."""
    result: dict[str, Any] = {}
    for page_size in (1, 16):
        (src,) = _sources(1, seed=3, page_size=page_size)
        batches = [src.batch(src.events(8, store_pages=8, grow_only=True))]
        while src.blocks < blocks:
            batches.append(src.batch(src.events(8, store_pages=8, grow_only=True)))
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            replicas = ReplicaSet()
            for batch in batches:
                replicas.apply(batch)
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        result[f"bytes_per_block_page{page_size}"] = (after - before) / len(replicas[src.source])
    result["bytes_per_block"] = result["bytes_per_block_page1"]
    return result


# --- lag --------------------------------------------------------------------------------------


class _SyntheticCache:
    """What ``swa_es.Publisher`` needs of a cache: ``ticks`` chunks of ``per_tick`` events
    generated before the timed run (with the digest after each), handed out one per tick."""

    page_size = 1
    sliding_window_size = 4
    device = "cpu"

    def __init__(self, source: SyntheticSource, ticks: int, per_tick: int) -> None:
        self.source = source
        self.pending: list[Event] = []
        self._chunks: list[tuple[list[Event], str]] = []
        for _ in range(ticks):
            events = source.events(per_tick, store_pages=1)
            self._chunks.append((events, source.digest.hexdigest()))
        self._handed = 0
        self._digest = StateDigest().hexdigest()

    def produce(self) -> None:
        events, self._digest = self._chunks[self._handed]
        self.pending += events
        self._handed += 1

    def take_events(self) -> list[Event]:
        events, self.pending = self.pending, []
        return events

    def snapshot_events(self) -> list[Event]:
        if self._handed:
            raise NotImplementedError("the lag bench runs with overflow='block'; no resyncs")
        return []

    def state_digest(self) -> str:
        return self._digest


TICK_S = 0.001


async def _produce(cache: _SyntheticCache, publisher: Publisher, ticks: int) -> int:
    started = time.perf_counter()
    backpressure = 0
    for tick in range(ticks):
        if (wait := started + tick * TICK_S - time.perf_counter()) > 0:
            await anyio.sleep(wait)
        cache.produce()
        try:
            publisher.step()
        except Backpressure:
            backpressure += 1  # counted and reported, never hidden
    await publisher.flush()
    return backpressure


async def bench_lag(url: str, rate: float, seconds: float) -> dict[str, Any]:
    """publish -> apply latency (batch ts to follower apply) at ``rate`` events/s."""
    (src,) = _sources(1, seed=4)
    ticks = round(seconds / TICK_S)
    cache = _SyntheticCache(src, ticks, max(1, round(rate * TICK_S)))
    lags_ms: list[float] = []
    warmup_until = time.time() + min(1.0, seconds / 5)
    last_seq = -1
    caught_up = anyio.Event()

    def record_lag(batch: EventBatch) -> None:
        now = time.time()
        if now >= warmup_until:
            lags_ms.append((now - batch.ts) * 1000)
        if batch.seq == last_seq:
            caught_up.set()

    async with await open_log(url) as log:
        follower = Follower(log, [ReplicaSet()], progress=False, on_applied=record_lag)
        async with anyio.create_task_group() as tasks:
            await tasks.start(follower.run)
            async with Publisher(cache, log, src.source, overflow="block") as publisher:
                backpressure = await _produce(cache, publisher, ticks)
                last_seq = _last_published_seq(follower, src.source, publisher)
                with anyio.fail_after(30):
                    if last_seq >= 0:
                        await caught_up.wait()
            tasks.cancel_scope.cancel()
    quantiles = statistics.quantiles(lags_ms, n=100)
    return {
        "rate_events_per_s": rate,
        "batches": len(lags_ms),
        "lag_p50_ms": quantiles[49],
        "lag_p99_ms": quantiles[98],
        "backpressure_steps": backpressure,
    }


def _last_published_seq(follower: Follower, source: str, publisher: Publisher) -> int:
    """The seq of the publisher's last batch, or -1 when the follower already applied it."""
    last = publisher.metrics.batches_queued - 1
    cursor = follower.cursors.get(source)
    return -1 if cursor is not None and cursor.seq >= last else last


# --- report -----------------------------------------------------------------------------------


def _row(name: str, value: float, target: float, higher_is_better: bool) -> str:
    ratio = value / target if higher_is_better else target / value
    verdict = "meets" if ratio >= 1 else "misses"
    return f"{name:<28} {value:>14,.2f} {target:>12,.2f} {ratio:>8.2f}x  {verdict}"


def report(results: dict[str, Any]) -> list[str]:
    """The measured-vs-target table (ratio > 1 means better than the target)."""
    lines = [f"{'measure':<28} {'measured':>14} {'target':>12} {'ratio':>9}"]
    checks = [
        ("replay_events_per_s", "replay_events_per_s", True),
        ("restore_speedup", "restore_speedup", True),
        ("restore_s", "restore_s", False),
        ("bytes_per_block", "bytes_per_block", False),
        ("lag_p99_ms_file", "lag_p99_ms_file", False),
        ("lag_p99_ms_kafka", "lag_p99_ms_kafka", False),
    ]
    for key, target, higher in checks:
        if key in results:
            lines.append(_row(key, results[key], TARGETS[target], higher))
    return lines


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every benchmark, in one run."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="replica-bench-") as tmp:
        work = Path(tmp)
        results["replay"] = await bench_replay(work, args.replay_events)
        results["restore"] = await bench_restore(work, args.blocks, args.tail_batches)
        results["memory"] = bench_memory(args.memory_blocks)
        for label, rate in (("lag_file", args.rate), ("lag_file_low_rate", args.low_rate)):
            lag_url = (work / f"{label}-log").as_uri()
            results[label] = await bench_lag(lag_url, rate, args.lag_s)
        if args.kafka:
            for label, rate in (("lag_kafka", args.rate), ("lag_kafka_low_rate", args.low_rate)):
                topic = f"swa-es-replica-bench-{uuid.uuid4().hex[:8]}"
                results[label] = await bench_lag(f"kafka://{args.kafka}/{topic}", rate, args.lag_s)
    results["machine"] = {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]}
    flat = {
        "replay_events_per_s": results["replay"]["replay_events_per_s"],
        "restore_speedup": results["restore"]["restore_speedup"],
        "restore_s": results["restore"]["restore_s"],
        "bytes_per_block": results["memory"]["bytes_per_block"],
        "lag_p99_ms_file": results["lag_file"]["lag_p99_ms"],
    }
    if "lag_kafka" in results:
        flat["lag_p99_ms_kafka"] = results["lag_kafka"]["lag_p99_ms"]
    results["summary"] = flat
    return results


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run, print the details and the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=1_000_000)
    parser.add_argument("--tail-batches", type=int, default=10_000)
    parser.add_argument("--replay-events", type=int, default=300_000)
    parser.add_argument("--memory-blocks", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=50_000.0)
    parser.add_argument("--low-rate", type=float, default=5_000.0, help="a second, lighter lag run")
    parser.add_argument("--lag-s", type=float, default=5.0)
    parser.add_argument("--kafka", help="host:port of a broker for the Kafka lag run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = anyio.run(run, args)
    for section, values in results.items():
        if section not in ("summary", "machine"):
            print(section, orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode())
    print("machine", results["machine"])
    print("\n".join(report(results["summary"])))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
