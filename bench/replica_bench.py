"""Benchmarks of the consumers, each beside its baseline in the same run, as ratios.

Rows (the issue-9 table):

- replay: events/s a ``Follower`` applies into a ``ReplicaSet`` from a FileLog (read a poll at a
  time, then the follower's fast lane: the poll's records decoded and applied in one native call,
  the few that need the follower's judgement, such as in-band digests, record by record),
  against ``orjson.loads`` of the same batches written as plain v1 JSON (one dict per event, one
  event per page) in memory; with the parts (FileLog read alone, ``decode_wire`` alone,
  ``apply_wire`` alone) measured the same way, and the record-by-record path (strict decode into
  ``WireBatch``, cursors, native apply: what a follower given ``on_applied`` takes). Two
  streams: small steps (16 events a batch, stores of 2 pages: the issue's figure) and page-1
  steps the size of a prefill (4 events a batch, stores of 64 chained pages);
- apply: page-1 blocks/s into a ``ReplicaSet`` from records in memory, for v2 records (chains
  joined, the common case) and the same batches as v1 records (one event per page): decode +
  apply, apply alone (``WireBatch`` already decoded), and apply with a ``PrefixIndex`` attached
  (the holder index kept in step), against the pure-Python reference replica;
- restore: a snapshot of about ``--blocks`` page-1 blocks plus a ``--tail-batches`` tail,
  against the v1-JSON parse of the whole log (and with a ``PrefixIndex`` attached);
- wire: bytes per page-1 block stored of v2 records (chains joined) whose stores are prefills
  of 16, 64 and 256 chained pages, beside the same batches as plain v1 JSON (the summary row is
  the 64-page stores, the size of the prefill-steps replay stream);
- memory: RSS per replica block at page sizes 1 and 16, replica alone and with the holder index
  a ``PrefixIndex`` adds: keeping no token ids (``ReplicaSet(keep_tokens=False)``, as every
  follower but the stream out's holds them: the row) and keeping them, beside;
- prefix: ``PrefixIndex.match`` p50/p99 of a ``--prompt-tokens`` prompt at page 16 that
  ``--prefix-sources`` sources all hold, against the pure-Python reference: asked again (its
  page digests are kept, so nothing is hashed) and cold (one more held prompt than the store
  keeps digests of, asked for in turn: every page hashed); hashing the prompt alone
  (``chain_block_hashes``) is the same-run floor;
- lag: publish -> apply p50/p99 at ``--rate`` events/s through ``swa_es.Publisher`` (a
  synthetic cache stands in for the tree) into a FileLog: a follower on the writer's own log
  (woken by each commit) and one on a ``readonly`` log of the same directory (how a follower in
  another process tails it), each with ``fsync=batch`` (the default) and ``fsync=never``, beside
  the ``fdatasync`` latency of the same directory measured in the same run; and into Kafka with
  ``--kafka host:port``.

Throughputs are in CPU seconds (``time.process_time``: every thread of the process, so the
FileLog's reader thread counts) on both sides of a ratio, since the machines these run on are
shared and the wall clock also counts other processes' turns; wall-clock figures are printed
beside them. Latencies (prefix, lag) are wall clock.

The stream is synthetic: per source, branches of pages from the root, grown, tombstoned,
revived and trimmed at random, with real chained block hashes::

    .venv/bin/python bench/replica_bench.py [--blocks 1000000] [--tail-batches 1]
        [--replay-events 300000] [--apply-blocks 1000000] [--memory-blocks 1000000]
        [--wire-blocks 100000]
        [--prompt-tokens 4096] [--prefix-sources 64] [--rate 50000] [--low-rate 5000]
        [--lag-s 5] [--kafka host:port] [--json OUT] [--only replay|lag|prefix]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import orjson
from dynamo_side import resident_bytes
from machine_load import CpuTicks, machine_row, steal_share_since

from cache import SWAKVAllocator, SWARadixCache
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
    WireBatch,
    block_hashes_of,
    chain_block_hashes,
    chain_page_digests,
    decode_wire,
    encode_batch,
)
from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStore, Stats
from log import EventLog, open_log
from log.file import FileLog
from swa_es import Backpressure, Publisher, PublisherConfig
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatWorkload
from tests.oracles.codec import batch_to_v1_pages_dict
from tests.oracles.replica import ReferenceReplicaSet

TARGETS = {
    "replay_vs_v1_json": 1.0,
    "apply_blocks_per_s": 5_000_000.0,
    "restore_speedup": 10.0,
    "rss_bytes_per_block": 26.0,
    "wire_bytes_per_block": 32.0,
    "prefix_p50_us": 50.0,
    "prefix_cold_p50_us": 50.0,
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


def v1_json(batch: EventBatch) -> bytes:
    """``batch`` as plain v1 JSON: one dict per event, one ``BlockStored`` per page."""
    return orjson.dumps(batch_to_v1_pages_dict(batch))


def v1_event_count(payloads: list[bytes]) -> int:
    """Events in plain v1 JSON payloads."""
    return sum(len(orjson.loads(p)["events"]) for p in payloads)


@dataclass(frozen=True)
class Timing:
    """One measured run: wall-clock and CPU seconds (every thread of the process)."""

    wall_s: float
    cpu_s: float


def _timed(work: Callable[[], object]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


async def _timed_async(work: Callable[[], Any]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    await work()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def _fastest(runs: list[Timing]) -> Timing:
    """The fastest of ``runs``, by CPU and by wall clock separately."""
    return Timing(min(r.wall_s for r in runs), min(r.cpu_s for r in runs))


def _best(work: Callable[[], object], repeats: int = 3) -> Timing:
    """The fastest of ``repeats`` runs."""
    return _fastest([_timed(work) for _ in range(repeats)])


async def _best_async(work: Callable[[], Any], repeats: int = 3) -> Timing:
    return _fastest([await _timed_async(work) for _ in range(repeats)])


def _parse_v1(payloads: list[bytes]) -> None:
    """``orjson.loads`` of every payload, each result dropped at once (so the collector's passes
    over millions of kept dicts do not slow the yardstick)."""
    for payload in payloads:
        orjson.loads(payload)


def _timed_v1_parse(payloads: list[bytes]) -> Timing:
    """``_parse_v1`` timed, best of 3."""
    return _best(lambda: _parse_v1(payloads))


def _rates(count: int, timing: Timing, prefix: str) -> dict[str, float]:
    return {f"{prefix}_per_s": count / timing.cpu_s, f"{prefix}_per_s_wall": count / timing.wall_s}


# --- replay -----------------------------------------------------------------------------------

REPLAY_ROUNDS = 5
"""Alternated rounds of the replay and its yardstick; the fastest of each counts."""


def _stream(
    sources: list[SyntheticSource], batches: int, events_per_batch: int, store_pages: int
) -> list[EventBatch]:
    out = []
    for index in range(batches):
        src = sources[index % len(sources)]
        events = src.events(events_per_batch, store_pages=store_pages)
        out.append(src.batch(events, with_digest=src.seq % 64 == 63))
    return out


async def bench_replay(
    work: Path, total_events: int, *, events_per_batch: int = 16, store_pages: int = 2
) -> dict[str, Any]:
    """Follower.catch_up events/s from a FileLog into a ReplicaSet, against orjson.loads of the
    same batches as plain v1 JSON; and the parts of it, timed alone. Events are counted as v1
    events (one per page of a store)."""
    sources = _sources(4, seed=1)
    # about total_events v1 events: a store counts store_pages of them
    per_batch_v1 = events_per_batch * (0.6 * store_pages + 0.4)
    count = max(1, round(total_events / per_batch_v1))
    batches = _stream(sources, count, events_per_batch, store_pages=store_pages)
    v1 = [v1_json(b) for b in batches]
    v2 = [encode_batch(b) for b in batches]
    events = v1_event_count(v1)
    log_dir = work / f"replay-log-{events_per_batch}-{store_pages}"
    async with await open_log(log_dir.as_uri(), fsync="never") as log:
        await _append_all(log, batches)
        last: list[ReplicaSet] = []

        async def replay() -> None:
            replicas = ReplicaSet()
            await Follower(log, [replicas]).catch_up()
            last[:] = [replicas]

        async def replay_standard_views() -> None:
            # the views every command builds (swa_es.service.views.StandardViews), keeping
            # token ids here as the ReplicaSet of `replay` does, so the two differ in views only
            replicas = ReplicaSet()
            views = [replicas, PrefixIndex(replicas), Stats(replicas)]
            await Follower(log, views).catch_up()

        async def replay_by_record() -> None:
            # on_applied needs each WireBatch, so this follower takes the record-by-record path
            await Follower(log, [ReplicaSet()], on_applied=lambda _: None).catch_up()

        async def read_only() -> None:
            async for _ in log.read("beginning"):
                pass

        # The replay and its yardstick alternate, so both see the same moments of a shared
        # machine whose speed drifts; each side's fastest round counts. The record-by-record
        # path (what a follower given on_applied takes) runs in the same rounds, for comparison.
        follow_runs, baseline_runs, by_record_runs, standard_runs = [], [], [], []
        for _ in range(REPLAY_ROUNDS):
            follow_runs.append(await _timed_async(replay))
            baseline_runs.append(_timed(lambda: _parse_v1(v1)))
            by_record_runs.append(await _timed_async(replay_by_record))
            standard_runs.append(await _timed_async(replay_standard_views))
        follow, baseline = _fastest(follow_runs), _fastest(baseline_runs)
        by_record, standard = _fastest(by_record_runs), _fastest(standard_runs)
        read = await _best_async(read_only)
    (replicas,) = last
    assert all(replicas[s.source].state_digest() == s.digest.hexdigest() for s in sources)
    decode = _best(lambda: [decode_wire(p) for p in v2])
    wires = [decode_wire(p) for p in v2]

    def apply_all() -> None:
        fresh = ReplicaSet()
        for wire in wires:
            fresh.apply_wire(wire)

    apply = _best(apply_all)
    return {
        "events": events,
        "records": len(batches),
        "v1_bytes_per_event": sum(map(len, v1)) / events,
        "v2_bytes_per_event": sum(map(len, v2)) / events,
        **_rates(events, follow, "replay_events"),
        **_rates(events, baseline, "v1_json_parse_events"),
        "replay_vs_v1_json": baseline.cpu_s / follow.cpu_s,
        "replay_vs_v1_json_wall": baseline.wall_s / follow.wall_s,
        "record_path_vs_v1_json": baseline.cpu_s / by_record.cpu_s,
        "lane_vs_record_path": by_record.cpu_s / follow.cpu_s,
        "standard_views_vs_replicas": standard.cpu_s / follow.cpu_s,
        "part_cpu_s": {
            "replay": follow.cpu_s,
            "replay_record_by_record": by_record.cpu_s,
            "replay_standard_views": standard.cpu_s,
            "filelog_read": read.cpu_s,
            "decode_wire": decode.cpu_s,
            "apply_wire": apply.cpu_s,
            "v1_json_parse": baseline.cpu_s,
        },
    }


# --- apply ------------------------------------------------------------------------------------


def _growth_batches(blocks: int, store_pages: int, seed: int) -> list[EventBatch]:
    """Page-1 batches of 8 stores of ``store_pages`` chained pages each, ``blocks`` in all."""
    (src,) = _sources(1, seed=seed)
    batches = [src.batch(src.events(8, store_pages=store_pages, grow_only=True))]
    while src.blocks < blocks:
        batches.append(src.batch(src.events(8, store_pages=store_pages, grow_only=True)))
    return batches


def bench_apply(blocks: int) -> dict[str, Any]:
    """Page-1 blocks/s into a ReplicaSet from records in memory: v2 (chains joined) and v1 (one
    event per page), decode + apply, apply alone, and with a PrefixIndex attached; against the
    pure-Python reference replica applying the same batches."""
    batches = _growth_batches(blocks, store_pages=16, seed=6)
    held = sum(len(e.block_hashes) for b in batches for e in b.events if hasattr(e, "block_hashes"))
    result: dict[str, Any] = {"blocks": held, "pages_per_store": 16}
    for version in (2, 1):
        # v1: one event per page, as a v1 writer (or an engine bridge) sends them
        records = [encode_batch(b) if version == 2 else v1_json(b) for b in batches]
        wires = [decode_wire(r) for r in records]

        def decode_apply(records: list[bytes] = records) -> None:
            replicas = ReplicaSet()
            for record in records:
                replicas.apply_wire(decode_wire(record))

        def apply_only(wires: list[WireBatch] = wires, with_index: bool = False) -> None:
            replicas = ReplicaSet()
            if with_index:
                PrefixIndex(replicas)
            for wire in wires:
                replicas.apply_wire(wire)

        tag = f"v{version}"
        result[f"{tag}_record_bytes_per_block"] = sum(map(len, records)) / held
        result.update(_rates(held, _best(decode_apply), f"{tag}_decode_apply_blocks"))
        result.update(_rates(held, _best(apply_only), f"{tag}_apply_blocks"))
        with_index = _best(lambda: apply_only(with_index=True))
        result.update(_rates(held, with_index, f"{tag}_apply_with_prefix_index_blocks"))
    subset = batches[: max(1, len(batches) // 20)]
    subset_blocks = sum(
        len(e.block_hashes) for b in subset for e in b.events if hasattr(e, "block_hashes")
    )

    def reference() -> None:
        replicas = ReferenceReplicaSet()
        for batch in subset:
            replicas.apply(batch)

    reference_rate = subset_blocks / _timed(reference).cpu_s
    result["reference_apply_blocks_per_s"] = reference_rate
    result["apply_blocks_per_s"] = result["v2_decode_apply_blocks_per_s"]
    result["apply_vs_reference"] = result["v2_decode_apply_blocks_per_s"] / reference_rate
    return result


# --- restore ----------------------------------------------------------------------------------


async def _timed_restore(
    log: EventLog, store: SnapshotStore | None, with_index: bool
) -> tuple[Timing, ReplicaSet]:
    replicas = ReplicaSet()
    views: list[Any] = [replicas, PrefixIndex(replicas)] if with_index else [replicas]
    # no periodic snapshots during the timed tail: the full replay (no store) writes none either
    follower = Follower(
        log,
        views,
        snapshots=store,
        snapshot_every_batches=1 << 40,
        snapshot_every_s=1e9,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    await follower.restore()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu), replicas


async def bench_restore(work: Path, blocks: int, tail_batches: int) -> dict[str, Any]:
    """A snapshot of ~``blocks`` blocks + a tail of ``tail_batches``, against the v1-JSON parse
    of the whole log (and a full replay); also restored with a PrefixIndex attached, whose
    holder index is rebuilt from the loaded blocks."""
    sources = _sources(4, seed=2)
    history: list[EventBatch] = []
    per_batch_blocks = 4 * 16
    for index in range(max(1, blocks // per_batch_blocks)):
        src = sources[index % len(sources)]
        history.append(src.batch(src.events(4, store_pages=16, grow_only=True)))
    result: dict[str, Any] = {"snapshot_blocks": sum(s.blocks for s in sources)}
    async with await open_log((work / "restore-log").as_uri(), fsync="never") as log:
        await _append_all(log, history)
        stores = {}
        for with_index in (False, True):
            stores[with_index] = SnapshotStore(work / f"restore-snap-{int(with_index)}")
            replicas = ReplicaSet()
            views: list[Any] = [replicas, PrefixIndex(replicas)] if with_index else [replicas]
            writer = Follower(log, views, snapshots=stores[with_index])
            await writer.catch_up()
            result["snapshot_bytes"] = (await writer.snapshot()).size_bytes
        tail = _stream(sources, tail_batches, 2, store_pages=2)
        await _append_all(log, tail)
        for with_index, store in stores.items():
            runs = [await _timed_restore(log, store, with_index) for _ in range(3)]
            for _, restored in runs:
                for src in sources:
                    assert restored[src.source].state_digest() == src.digest.hexdigest()
            suffix = "_with_prefix_index" if with_index else ""
            result[f"restore_cpu_s{suffix}"] = min(t.cpu_s for t, _ in runs)
            result[f"restore_wall_s{suffix}"] = min(t.wall_s for t, _ in runs)
        full, replayed = await _timed_restore(log, None, False)
        for src in sources:
            assert replayed[src.source].state_digest() == src.digest.hexdigest()
    baseline = _timed_v1_parse([v1_json(b) for b in [*history, *tail]])
    result.update(
        {
            "tail_batches": tail_batches,
            "v1_json_parse_cpu_s": baseline.cpu_s,
            "v1_json_parse_wall_s": baseline.wall_s,
            "full_replay_cpu_s": full.cpu_s,
            "restore_speedup": baseline.cpu_s / result["restore_cpu_s"],
            "restore_speedup_wall": baseline.wall_s / result["restore_wall_s"],
            "restore_speedup_with_prefix_index": baseline.cpu_s
            / result["restore_cpu_s_with_prefix_index"],
            "restore_vs_full_replay": full.cpu_s / result["restore_cpu_s"],
        }
    )
    return result


# --- wire -------------------------------------------------------------------------------------


def bench_wire(blocks: int) -> dict[str, Any]:
    """Bytes per page-1 block stored, v2 (chains joined) against v1, for stores of 16, 64 and
    256 chained pages (whole records: headers and the epoch-opening clear included)."""
    result: dict[str, Any] = {}
    for pages in (16, 64, 256):
        batches = _growth_batches(blocks, store_pages=pages, seed=7)
        held = sum(
            len(e.block_hashes) for b in batches for e in b.events if isinstance(e, BlockStored)
        )
        result[f"v2_bytes_per_block_{pages}_pages"] = (
            sum(len(encode_batch(b)) for b in batches) / held
        )
        result[f"v1_bytes_per_block_{pages}_pages"] = sum(len(v1_json(b)) for b in batches) / held
    result["wire_bytes_per_block"] = result["v2_bytes_per_block_64_pages"]
    return result


# --- memory -----------------------------------------------------------------------------------


def bench_memory(blocks: int) -> dict[str, Any]:
    """RSS growth per block of a ReplicaSet built from ``blocks`` blocks, page sizes 1 and 16
    (the records are decoded before the first reading, so only the replica is counted); then
    the growth when a PrefixIndex is attached (its holder index). Keeping no token ids (the
    keys without a suffix) and keeping them (``_keeping_tokens``)."""
    result: dict[str, Any] = {}
    for page_size, keep_tokens in ((1, False), (16, False), (1, True), (16, True)):
        suffix = "_keeping_tokens" if keep_tokens else ""
        (src,) = _sources(1, seed=3, page_size=page_size)
        batches = [src.batch(src.events(8, store_pages=64, grow_only=True))]
        while src.blocks < blocks:
            batches.append(src.batch(src.events(8, store_pages=64, grow_only=True)))
        wires = [decode_wire(encode_batch(b)) for b in batches]
        del batches
        before = resident_bytes()
        replicas = ReplicaSet(keep_tokens=keep_tokens)
        for wire in wires:
            replicas.apply_wire(wire)
        after = resident_bytes()
        PrefixIndex(replicas)
        with_index = resident_bytes()
        held = len(replicas[src.source])
        key = f"page{page_size}{suffix}"
        result[f"rss_bytes_per_block_{key}"] = (after - before) / held
        result[f"rss_bytes_per_block_{key}_prefix_index"] = (with_index - after) / held
        result[f"heap_bytes_per_block_{key}"] = replicas.store.heap_bytes() / held
        result[f"heap_bytes_per_block_{key}_prefix_index"] = (
            replicas.store.prefix_index_heap_bytes() / held
        )
        result[f"blocks_page{page_size}"] = held
        del replicas, wires
    result["rss_bytes_per_block"] = result["rss_bytes_per_block_page1"]
    return result


# --- prefix -----------------------------------------------------------------------------------


def _latencies_us(work: Callable[[], object], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.quantiles(samples, n=100)


# one more held prompt than the native store keeps the page digests of (8), asked for in turn
COLD_PROMPTS = 9


def bench_prefix(prompt_tokens: int, sources: int, page_size: int = 16) -> dict[str, Any]:
    """PrefixIndex.match latency for a prompt every source holds, against the reference; hashing
    the prompt alone is the floor.

    The store keeps the page digests of the last few prompts matched, so asking for the same
    prompt again hashes nothing (``prefix_p50_us``); the cold figure (``prefix_cold_p50_us``)
    asks for more held prompts than it keeps, in turn, so that every page of every query is
    hashed."""
    prompts = [
        [random.Random(5 + k).randrange(1 << 16) for _ in range(prompt_tokens)]
        for k in range(COLD_PROMPTS)
    ]
    prompt = prompts[0]
    replicas, reference = ReplicaSet(), ReferenceReplicaSet()
    index = PrefixIndex(replicas)
    meta = BatchMeta(page_size, 4 * page_size, digest_alg=DIGEST_ALGORITHM)
    stores = []
    for held in prompts:
        hashes = tuple(chain_block_hashes(b"", held, page_size))
        stores.append(BlockStored(hashes, None, tuple(held[: len(hashes) * page_size]), page_size))
    for number in range(sources):
        source = f"w{number}"
        replicas.apply(EventBatch(source, "e", 0, 0.0, (AllBlocksCleared(), *stores), None, meta))
        first = (AllBlocksCleared(), stores[0])
        reference.apply(EventBatch(source, "e", 0, 0.0, first, None, meta))
    expected = prompt_tokens // page_size * page_size
    assert all(m.full_tokens == expected for m in index.match(prompt).values())
    assert len(index.match(prompt)) == sources
    native = _latencies_us(lambda: index.match(prompt), 3000)
    turn = iter(range(1 << 62))
    cold = _latencies_us(lambda: index.match(prompts[next(turn) % COLD_PROMPTS]), 3000)
    hashing = _latencies_us(lambda: chain_block_hashes(b"", prompt, page_size), 3000)
    python = _latencies_us(lambda: reference.match(prompt), 30)
    return {
        "prompt_tokens": prompt_tokens,
        "page_size": page_size,
        "sources": sources,
        "prefix_p50_us": native[49],
        "prefix_p99_us": native[98],
        "prefix_cold_p50_us": cold[49],
        "prefix_cold_p99_us": cold[98],
        "hash_prompt_p50_us": hashing[49],
        "reference_p50_us": python[49],
        "prefix_vs_reference": python[49] / native[49],
    }


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
TREE_POOL_TOKENS = (32768, 8192)  # full, SWA: the pools of bench/cache_bench.py
TREE_WINDOW = 256


async def _produce(produce: Callable[[], None], publisher: Publisher, ticks: int) -> int:
    """One ``produce`` and ``step()`` per tick, on schedule; the loop is yielded to before
    every tick, also when behind schedule, as a serving loop does between its steps (without
    that, a producer catching up after any stall would starve the publisher's and the
    follower's tasks until it had caught up)."""
    started = time.perf_counter()
    backpressure = 0
    for tick in range(ticks):
        if (wait := started + tick * TICK_S - time.perf_counter()) > 0:
            await anyio.sleep(wait)
        else:
            await anyio.lowlevel.checkpoint()
        produce()
        try:
            publisher.step()
        except Backpressure:
            backpressure += 1  # counted and reported, never hidden
    await publisher.flush()
    return backpressure


async def _measure_lag(
    url: str,
    cache: Any,
    source: str,
    ticks: int,
    produce: Callable[[], None],
    *,
    readonly: bool,
) -> dict[str, Any]:
    """Publish ``produce``'s changes to ``cache`` once per tick for ``ticks`` ticks; lag = the
    follower's apply time - the batch ts, past a warm-up."""
    seconds = ticks * TICK_S
    lags_ms: list[float] = []
    applied_events = 0
    warmup_until = time.time() + min(1.0, seconds / 5)
    last_seq = -1
    caught_up = anyio.Event()

    def record_lag(batch: WireBatch) -> None:
        nonlocal applied_events
        now = time.time()
        if now >= warmup_until:
            lags_ms.append((now - batch.ts) * 1000)
        applied_events += batch.event_count
        if batch.seq == last_seq:
            caught_up.set()

    async with await open_log(url) as log:
        reader_url = f"{url}{'&' if '?' in url else '?'}readonly=true" if readonly else None
        reader = await open_log(reader_url) if reader_url else log
        try:
            follower = Follower(reader, [ReplicaSet()], on_applied=record_lag)
            async with anyio.create_task_group() as tasks:
                await tasks.start(follower.run)
                async with Publisher(
                    cache, log, source, config=PublisherConfig(overflow="block")
                ) as publisher:
                    backpressure = await _produce(produce, publisher, ticks)
                    last_seq = _last_published_seq(follower, source, publisher)
                    with anyio.fail_after(60):
                        if last_seq >= 0:
                            await caught_up.wait()
                tasks.cancel_scope.cancel()
            syncs = _fdatasync_ms(log)
        finally:
            if reader is not log:
                await reader.close()
    quantiles = statistics.quantiles(lags_ms, n=100)
    return {
        "applied_events_per_s": applied_events / seconds,
        "batches": len(lags_ms),
        "lag_p50_ms": quantiles[49],
        "lag_p99_ms": quantiles[98],
        "backpressure_steps": backpressure,
        **syncs,
    }


def _fdatasync_ms(log: EventLog) -> dict[str, float]:
    """The mean and the slowest fdatasync of a FileLog's commits so far (none for other logs):
    a commit, and every batch queued behind it, waits out the slowest."""
    if not isinstance(log, FileLog) or not log.stats.syncs:
        return {}
    stats = log.stats
    return {
        "fdatasync_mean_ms": stats.sync_s_total / stats.syncs * 1000,
        "fdatasync_max_ms": stats.sync_s_max * 1000,
    }


async def bench_lag(
    url: str, rate: float, seconds: float, *, readonly: bool = False
) -> dict[str, Any]:
    """publish -> apply latency (batch ts to follower apply) at ``rate`` events/s; ``readonly``:
    the follower reads a second, readonly FileLog of the same directory (as a follower in
    another process does)."""
    (src,) = _sources(1, seed=4)
    ticks = round(seconds / TICK_S)
    cache = _SyntheticCache(src, ticks, max(1, round(rate * TICK_S)))
    result = await _measure_lag(url, cache, src.source, ticks, cache.produce, readonly=readonly)
    return {"rate_events_per_s": rate, **result}


async def bench_lag_tree(
    url: str, seconds: float, *, page_size: int = 16, requests_per_tick: int = 1
) -> dict[str, Any]:
    """The same lag with a real ``SWARadixCache`` serving chat requests (``requests_per_tick``
    a tick): the publisher's native path, where steps are cut on the loop and hashed and
    encoded on the recorder's encoder thread."""
    full, swa = TREE_POOL_TOKENS
    allocator = SWAKVAllocator(full, swa, page_size=page_size, device="cpu")
    cache = SWARadixCache(allocator, sliding_window_size=TREE_WINDOW, page_size=page_size)
    worker = CacheWorker(cache)
    ticks = round(seconds / TICK_S)
    requests = iter(ChatWorkload(seed=6).take(ticks * requests_per_tick))

    def serve() -> None:
        for _ in range(requests_per_tick):
            worker.serve(next(requests))

    result = await _measure_lag(url, cache, "tree-0", ticks, serve, readonly=False)
    return {"page_size": page_size, "requests_per_tick": requests_per_tick, **result}


def _last_published_seq(follower: Follower, source: str, publisher: Publisher) -> int:
    """The seq of the publisher's last batch, or -1 when the follower already applied it."""
    last = publisher.metrics.batches_queued - 1
    cursor = follower.cursors.get(source)
    return -1 if cursor is not None and cursor.seq >= last else last


def fdatasync_ms(directory: Path, count: int = 200, record_bytes: int = 2048) -> dict[str, float]:
    """p50/p99 of write + fdatasync of one small record in ``directory``: what the FileLog's
    ``batch`` policy waits for per commit on this disk, in the same run."""
    path = directory / "fdatasync-probe"
    samples = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, b"x" * record_bytes)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    quantiles = statistics.quantiles(samples, n=100)
    return {"p50_ms": quantiles[49], "p99_ms": quantiles[98]}


# --- report -----------------------------------------------------------------------------------


def _row(name: str, value: float, target: float, higher_is_better: bool) -> str:
    ratio = value / target if higher_is_better else target / value
    verdict = "meets" if ratio >= 1 else "misses"
    return f"{name:<28} {value:>14,.2f} {target:>12,.2f} {ratio:>8.2f}x  {verdict}"


def report(results: dict[str, Any]) -> list[str]:
    """The measured-vs-target table (ratio > 1 means better than the target)."""
    lines = [f"{'measure':<28} {'measured':>14} {'target':>12} {'ratio':>9}"]
    checks = [
        ("replay_vs_v1_json", True),
        ("apply_blocks_per_s", True),
        ("restore_speedup", True),
        ("rss_bytes_per_block", False),
        ("wire_bytes_per_block", False),
        ("prefix_p50_us", False),
        ("prefix_cold_p50_us", False),
        ("lag_p99_ms_file", False),
        ("lag_p99_ms_kafka", False),
    ]
    for key, higher in checks:
        if key in results:
            lines.append(_row(key, results[key], TARGETS[key], higher))
    return lines


LAG_RUNS = (
    # (label, fsync, readonly follower, rate flag)
    ("lag_file", "batch", False, "rate"),
    ("lag_file_readonly", "batch", True, "rate"),
    ("lag_file_fsync_never", "never", False, "rate"),
    ("lag_file_readonly_fsync_never", "never", True, "rate"),
    ("lag_file_low_rate", "batch", False, "low_rate"),
)


async def _run_lag(args: argparse.Namespace, work: Path, results: dict[str, Any]) -> None:
    """The FileLog lag rows, between two fdatasync probes of the same directory, each with the
    share of CPU time the hypervisor gave other guests meanwhile."""
    results["fdatasync_before_lag"] = fdatasync_ms(work)
    for label, fsync, readonly, rate in LAG_RUNS:
        lag_url = (work / f"{label}-log").as_uri() + f"?fsync={fsync}"
        started = CpuTicks.now()
        results[label] = await bench_lag(
            lag_url, getattr(args, rate), args.lag_s, readonly=readonly
        )
        results[label]["steal_share"] = steal_share_since(started)
    tree_url = (work / "lag_file_tree-log").as_uri() + "?fsync=batch"
    started = CpuTicks.now()
    results["lag_file_tree"] = await bench_lag_tree(tree_url, args.lag_s)
    results["lag_file_tree"]["steal_share"] = steal_share_since(started)
    results["fdatasync_after_lag"] = fdatasync_ms(work)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every benchmark, in one run."""
    results: dict[str, Any] = {}
    started = CpuTicks.now()
    with tempfile.TemporaryDirectory(prefix="replica-bench-") as tmp:
        work = Path(tmp)
        if args.only == "replay":
            results["replay"] = await bench_replay(work, args.replay_events)
            results["replay_prefill_steps"] = await bench_replay(
                work, args.replay_events, events_per_batch=4, store_pages=64
            )
            results["machine"] = machine_row(started)
            results["summary"] = {"replay_vs_v1_json": results["replay"]["replay_vs_v1_json"]}
            return results
        if args.only == "lag":
            await _run_lag(args, work, results)
            results["machine"] = machine_row(started)
            results["summary"] = {"lag_p99_ms_file": results["lag_file"]["lag_p99_ms"]}
            return results
        if args.only == "prefix":
            results["prefix"] = bench_prefix(args.prompt_tokens, args.prefix_sources)
            results["machine"] = machine_row(started)
            results["summary"] = {
                key: results["prefix"][key] for key in ("prefix_p50_us", "prefix_cold_p50_us")
            }
            return results
        if args.only == "memory":
            results["memory"] = bench_memory(args.memory_blocks)
            results["machine"] = machine_row(started)
            results["summary"] = {"rss_bytes_per_block": results["memory"]["rss_bytes_per_block"]}
            return results
        results["memory"] = bench_memory(args.memory_blocks)
        results["wire"] = bench_wire(args.wire_blocks)
        results["apply"] = bench_apply(args.apply_blocks)
        results["replay"] = await bench_replay(work, args.replay_events)
        # page-1 steps the size of a prefill: 4 events a batch, stores of 64 chained pages
        results["replay_prefill_steps"] = await bench_replay(
            work, args.replay_events, events_per_batch=4, store_pages=64
        )
        results["restore"] = await bench_restore(work, args.blocks, args.tail_batches)
        results["prefix"] = bench_prefix(args.prompt_tokens, args.prefix_sources)
        await _run_lag(args, work, results)
        if args.kafka:
            for label, rate in (("lag_kafka", args.rate), ("lag_kafka_low_rate", args.low_rate)):
                topic = f"swa-es-replica-bench-{uuid.uuid4().hex[:8]}"
                results[label] = await bench_lag(f"kafka://{args.kafka}/{topic}", rate, args.lag_s)
    results["machine"] = machine_row(started)
    flat = {
        "replay_vs_v1_json": results["replay"]["replay_vs_v1_json"],
        "apply_blocks_per_s": results["apply"]["apply_blocks_per_s"],
        "restore_speedup": results["restore"]["restore_speedup"],
        "rss_bytes_per_block": results["memory"]["rss_bytes_per_block"],
        "wire_bytes_per_block": results["wire"]["wire_bytes_per_block"],
        "prefix_p50_us": results["prefix"]["prefix_p50_us"],
        "prefix_cold_p50_us": results["prefix"]["prefix_cold_p50_us"],
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
    parser.add_argument("--tail-batches", type=int, default=1)
    parser.add_argument("--replay-events", type=int, default=300_000)
    parser.add_argument("--apply-blocks", type=int, default=1_000_000)
    parser.add_argument("--memory-blocks", type=int, default=1_000_000)
    parser.add_argument("--wire-blocks", type=int, default=100_000)
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--prefix-sources", type=int, default=64)
    parser.add_argument("--rate", type=float, default=50_000.0)
    parser.add_argument("--low-rate", type=float, default=5_000.0, help="a second, lighter lag run")
    parser.add_argument("--lag-s", type=float, default=5.0)
    parser.add_argument("--kafka", help="host:port of a broker for the Kafka lag run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--only",
        choices=["replay", "lag", "prefix", "memory"],
        help=(
            "run only these rows (replay: both replay streams; lag: the FileLog lag rows;"
            " prefix: the prefix rows; memory: the memory rows)"
        ),
    )
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
