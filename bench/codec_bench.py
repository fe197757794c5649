"""Benchmark of the batch codec, side by side with its baselines in one run, as ratios.

The batches are real: a ``SWARadixCache`` at page size 1 (CPU) serves the seeded multi-turn
chat workload (``swa_es.engine.workload``), evicting when its pools are short, and each group of
``--requests-per-batch`` requests' events becomes one batch (one event per page for stores,
SWA evictions and removals mixed in, as a worker's publisher would write them).

- decode: events/s (one event per page) of ``decode_wire`` on our version-2 records, against
  ``orjson.loads`` of the same batches written as plain version-1 JSON (one object per event):
  the yardstick of issue 9, which does not move when our wire gets smaller. Also shown:
  ``decode_wire`` of the version-1 records, ``decode_batch`` (every event a Python object) and
  the pure-Python reference decoder, each with its ratio to the same baseline;
- encode: events/s of ``encode_batch`` (version 2) against the reference encoder (orjson of
  the JSON objects, compacted the same way);
- wire: the bytes a stored page-1 block costs (its ``BlockStored`` on the wire, divided by the
  pages stored; the target is 32) in version 2 and version 1, and in the worst case for version
  2, where no two stores of a batch chain; and whole records' bytes per event (removals and SWA
  evictions list every page's hash, about 20 bytes each, in both versions).

Each timing is the best of ``--repeat`` rounds; the rounds interleave the contenders, and the
fixture's objects are frozen out of the garbage collector's sight before timing::

    .venv/bin/python bench/codec_bench.py [--requests 600] [--requests-per-batch 4]
        [--repeat 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from cache import SWAKVAllocator, SWARadixCache
from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    Event,
    EventBatch,
    batch_to_dict,
    decode_batch,
    decode_wire,
    encode_batch,
)
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatWorkload
from tests.oracles import codec as reference

WIRE_TARGET_BYTES = 32
DECODE_TARGET_RATIO = 1.0


def chat_batches(requests: int, per_batch: int, seed: int = 7) -> list[EventBatch]:
    """The batches a page-1 worker publishes while serving ``requests`` chat requests."""
    allocator = SWAKVAllocator(full_size=32768, swa_size=8192, page_size=1, device="cpu")
    cache = SWARadixCache(allocator, sliding_window_size=1024, page_size=1, enable_events=True)
    cache.take_events()
    worker = CacheWorker(cache)
    workload = ChatWorkload(seed)
    meta = BatchMeta(1, 1024, digest_alg=DIGEST_ALGORITHM, device="cpu", producer="swa-es")
    batches = [EventBatch("worker-0", "e", 0, time.time(), (AllBlocksCleared(),), None, meta)]
    pending: list[Event] = []
    for index in range(requests):
        worker.serve(workload.next_request())
        pending.extend(cache.take_events())
        if (index + 1) % per_batch == 0 and pending:
            batches.append(EventBatch("worker-0", "e", len(batches), time.time(), tuple(pending)))
            pending = []
    return batches


def isolated_stores(batches: Sequence[EventBatch]) -> list[EventBatch]:
    """The same batches' stores with every chain broken: no two stores of a batch join."""
    out = []
    for batch in batches:
        events = tuple(
            BlockStored(e.block_hashes, None, e.token_ids, e.block_size, e.lora_id, e.medium)
            for e in batch.events
            if isinstance(e, BlockStored)
        )
        out.append(EventBatch(batch.source, batch.epoch, batch.seq, batch.ts, events))
    return out


def plain_v1(batch: EventBatch) -> bytes:
    """The batch as plain version-1 JSON, one object per event (the baseline's input)."""
    raw = batch_to_dict(batch)
    raw["v"] = 1
    return orjson.dumps(raw)


def each(work: Callable[[Any], object], items: Sequence[Any]) -> None:
    """Apply ``work`` to every item, keeping no result (as a follower drops each batch)."""
    for item in items:
        work(item)


def best_of(rounds: int, contenders: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The best wall time of each contender over ``rounds`` interleaved rounds."""
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(rounds):
        for name, work in contenders.items():
            gc.collect()
            started = time.perf_counter()
            work()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def store_bytes(records: Sequence[bytes]) -> int:
    """The wire bytes of the records' ``BlockStored`` events, each with its separating comma
    (the encoders write exactly ``orjson.dumps`` of each event object)."""
    return sum(
        len(orjson.dumps(event)) + 1
        for record in records
        for event in orjson.loads(record)["events"]
        if event["type"] == "BlockStored"
    )


def stored_pages(batches: Sequence[EventBatch]) -> int:
    """How many page-1 blocks the batches store."""
    return sum(len(e.block_hashes) for b in batches for e in b.events if isinstance(e, BlockStored))


def run(requests: int, per_batch: int, rounds: int) -> dict[str, Any]:
    """Every figure of the module docstring."""
    batches = chat_batches(requests, per_batch)
    events = sum(len(b.events) for b in batches)
    v2 = [encode_batch(b) for b in batches]
    v1_ours = [encode_batch(_as_v1(b)) for b in batches]
    v1_plain = [plain_v1(b) for b in batches]
    assert [decode_batch(p) for p in v2] == batches
    # The batches built above are a million tracked objects: freeze them out of the collector's
    # sight, so no contender pays for full collections walking the fixture.
    gc.collect()
    gc.freeze()
    decode_times = best_of(
        rounds,
        {
            "orjson_loads_v1": lambda: each(orjson.loads, v1_plain),
            "decode_wire_v2": lambda: each(decode_wire, v2),
            "decode_wire_v1": lambda: each(decode_wire, v1_ours),
            "decode_batch_v2": lambda: each(decode_batch, v2),
            "reference_decode_v2": lambda: each(reference.decode_batch, v2),
        },
    )
    encode_times = best_of(
        rounds,
        {
            "reference_encode_v2": lambda: each(reference.encode_batch, batches),
            "encode_batch_v2": lambda: each(encode_batch, batches),
        },
    )
    baseline = events / decode_times["orjson_loads_v1"]
    decode = {
        name: {
            "events_per_s": events / seconds,
            "ratio_to_orjson_loads_v1": events / seconds / baseline,
        }
        for name, seconds in decode_times.items()
    }
    encode_baseline = events / encode_times["reference_encode_v2"]
    encode = {
        name: {
            "events_per_s": events / seconds,
            "ratio_to_reference": events / seconds / encode_baseline,
        }
        for name, seconds in encode_times.items()
    }
    pages = stored_pages(batches)
    lone = isolated_stores(batches)
    wire = {
        "stored_blocks": pages,
        "events": events,
        "batches": len(batches),
        "v2_store_bytes_per_block": store_bytes(v2) / pages,
        "v1_store_bytes_per_block": store_bytes(v1_plain) / pages,
        "v2_record_bytes_per_event": sum(map(len, v2)) / events,
        "v1_record_bytes_per_event": sum(map(len, v1_plain)) / events,
        "isolated_v2_store_bytes_per_block": store_bytes([encode_batch(b) for b in lone])
        / stored_pages(lone),
    }
    return {"decode": decode, "encode": encode, "wire": wire}


def _fields(batch: EventBatch) -> dict[str, Any]:
    return {name: getattr(batch, name) for name in batch.__dataclass_fields__}


def _as_v1(batch: EventBatch) -> EventBatch:
    """``batch`` as version 1, which carries no removal reasons (version 3 added them)."""
    events = tuple(
        dataclasses.replace(e, reason=None) if isinstance(e, BlockRemoved) else e
        for e in batch.events
    )
    return EventBatch(**{**_fields(batch), "events": events, "v": 1})


def report(result: dict[str, Any]) -> None:
    """Print the tables."""
    wire = result["wire"]
    print(
        f"workload: {wire['batches']} batches, {wire['events']} events, "
        f"{wire['stored_blocks']} page-1 blocks stored"
    )
    print("\ndecode (events/s; ratio to orjson.loads of the same batches as plain v1 JSON)")
    for name, row in result["decode"].items():
        mark = ""
        if name == "decode_wire_v2":
            ok = row["ratio_to_orjson_loads_v1"] >= DECODE_TARGET_RATIO
            mark = f"   target >= {DECODE_TARGET_RATIO}x: {'met' if ok else 'MISSED'}"
        ratio = row["ratio_to_orjson_loads_v1"]
        print(f"  {name:22} {row['events_per_s']:>14,.0f}  {ratio:6.2f}x{mark}")
    print("\nencode (events/s; ratio to the reference encoder)")
    for name, row in result["encode"].items():
        print(f"  {name:22} {row['events_per_s']:>14,.0f}  {row['ratio_to_reference']:6.2f}x")
    ok = wire["v2_store_bytes_per_block"] <= WIRE_TARGET_BYTES
    print("\nwire (a store's bytes: its BlockStored event on the wire, per page-1 block stored)")
    print(
        f"  v2 store bytes per block            {wire['v2_store_bytes_per_block']:7.1f}"
        f"   target <= {WIRE_TARGET_BYTES}: {'met' if ok else 'MISSED'}"
    )
    print(f"  v1 store bytes per block            {wire['v1_store_bytes_per_block']:7.1f}")
    print(f"  v2, no chains (worst case)          {wire['isolated_v2_store_bytes_per_block']:7.1f}")
    print(f"  v2 record bytes per event (all)     {wire['v2_record_bytes_per_event']:7.1f}")
    print(f"  v1 record bytes per event (all)     {wire['v1_record_bytes_per_event']:7.1f}")


def main() -> None:
    """Parse the options, run, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--requests-per-batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    result = run(args.requests, args.requests_per_batch, args.repeat)
    report(result)
    if args.json:
        with open(args.json, "wb") as out:
            out.write(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
