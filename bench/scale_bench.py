"""One follower's native store at scale: RSS per held block, ingest rate, snapshot write and
restore, and prefix-match latency, at each size asked for beside the smallest one, in one run.

    .venv/bin/python bench/scale_bench.py --blocks 1000000,16000000 [--sources 1024] [--json OUT]

Each size holds ``--sources`` sources (1,024 by default) of page-16 blocks, all of them the
same count, in one record per source. The records are not built from Python events: one record
text is laid out once, with every block hash written as 19 digits at a known place, and for
each source its name and its hashes (distinct, spread over int64 by a mixer) are written into
that text with numpy before ``decode_wire`` and ``apply_wire`` (the timed ingest). Every source
also holds ``QUERY_PROMPTS`` prompts of 1,024 tokens with their real block hashes; the matches
ask for those and for as many prompts nobody stored, in turn, from tokens
(``match_prefix``) and with the page hashes given (``match_hashes_into``). Sizes run in the order
given, each in a fresh store after the previous one is dropped; RSS growth is read from
/proc/self/statm.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cache.events import block_hashes_of, chain_page_digests
from cache.events._native import ReplicaStore, decode_wire
from consumers import PrefixMatch

PAGE = 16
PROMPT_PAGES = 256
"""Pages of one filler store event (a 4,096-token prompt)."""
QUERY_PROMPTS = 4
QUERY_TOKENS = 1024
HASH_DIGITS = 19
NAME_DIGITS = 6
MAX_RECORD_BYTES = 64 * 1024 * 1024


class ScaleBenchError(ValueError):
    """A size or source count the benchmark cannot lay out."""


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_s() -> float:
    return time.thread_time()


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 values (wrapping)."""
    z = values + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


_POW10 = np.array([10**k for k in range(HASH_DIGITS - 1, -1, -1)], dtype=np.uint64)
_LOW = 10**18
_SPAN = 8 * 10**18  # hashes in [10**18, 9 * 10**18): 19 digits, all below 2**63


@dataclass(frozen=True)
class Query:
    """A prompt of ``QUERY_TOKENS`` tokens and its page block hashes."""

    tokens: list[int]
    hashes: list[int]


def _queries(count: int, first: int) -> list[Query]:
    out = []
    for k in range(first, first + count):
        tokens = [(k * 7_919 + t * 31) % 50_000 for t in range(QUERY_TOKENS)]
        out.append(Query(tokens, block_hashes_of(chain_page_digests(b"", tokens, PAGE))))
    return out


class RecordTemplate:
    """One source's record text with slots for its name and filler block hashes."""

    def __init__(self, filler_blocks: int, held: list[Query]) -> None:
        if filler_blocks < 0:
            raise ScaleBenchError(f"filler_blocks: expected >= 0, got {filler_blocks}")
        placeholder = "9" * HASH_DIGITS
        tokens = ",".join(str((t * 37) % 1000) for t in range(PROMPT_PAGES * PAGE))
        events = ['{"type":"AllBlocksCleared"}']
        for query in held:
            events.append(
                '{"type":"BlockStored","block_hashes":['
                + ",".join(map(str, query.hashes))
                + '],"parent_block_hash":null,"token_ids":['
                + ",".join(map(str, query.tokens))
                + '],"block_size":16,"lora_id":null,"medium":"GPU"}'
            )
        head = (
            '{"v":3,"source":"s' + "0" * NAME_DIGITS + '","epoch":"e","seq":0,"ts":1.0,"events":['
        )
        parts = [head + ",".join(events)]
        left = filler_blocks
        while left:
            pages = min(PROMPT_PAGES, left)
            page_tokens = (
                tokens if pages == PROMPT_PAGES else ",".join(tokens.split(",")[: pages * PAGE])
            )
            parts.append(
                ',{"type":"BlockStored","block_hashes":['
                + ",".join([placeholder] * pages)
                + '],"parent_block_hash":null,"token_ids":['
                + page_tokens
                + '],"block_size":16,"lora_id":null,"medium":"GPU"}'
            )
            left -= pages
        parts.append('],"digest":null,"meta":{"page_size":16,"sliding_window_size":4}}')
        text = "".join(parts).encode()
        self.buffer = np.frombuffer(text, dtype=np.uint8).copy()
        self.name_at = len('{"v":3,"source":"s')
        # every placeholder's first digit (no other run of 19 nines is in the text)
        slots = []
        search = 0
        needle = placeholder.encode()
        while (found := text.find(needle, search)) >= 0:
            slots.append(found)
            search = found + HASH_DIGITS
        if len(slots) != filler_blocks:
            raise ScaleBenchError(f"template: {len(slots)} hash slots for {filler_blocks} blocks")
        self.slots = (np.array(slots, dtype=np.int64)[:, None] + np.arange(HASH_DIGITS)).ravel()

    def record(self, source: int) -> bytes:
        """The record of source number ``source``: its name and its own filler hashes."""
        count = len(self.slots) // HASH_DIGITS
        keys = np.arange(count, dtype=np.uint64) + np.uint64(source) * np.uint64(1 << 32)
        hashes = _mix(keys) % np.uint64(_SPAN) + np.uint64(_LOW)
        digits = (hashes[:, None] // _POW10[None, :]) % np.uint64(10) + np.uint64(48)
        self.buffer[self.slots] = digits.astype(np.uint8).ravel()
        name = f"{source:0{NAME_DIGITS}d}".encode()
        self.buffer[self.name_at : self.name_at + NAME_DIGITS] = np.frombuffer(name, np.uint8)
        return self.buffer.tobytes()


def _quantiles_us(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1e6, cuts[98] * 1e6


def _match_latencies(store: ReplicaStore, queries: list[Query], rounds: int) -> dict[str, float]:
    token_s: list[float] = []
    hash_s: list[float] = []
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            store.match_into(query.tokens, None, PrefixMatch)
            token_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            store.match_hashes_into(query.hashes, PAGE, PrefixMatch)
            hash_s.append(time.perf_counter() - started)
    tp50, tp99 = _quantiles_us(token_s)
    hp50, hp99 = _quantiles_us(hash_s)
    return {
        "match_tokens_p50_us": tp50,
        "match_tokens_p99_us": tp99,
        "match_hashes_p50_us": hp50,
        "match_hashes_p99_us": hp99,
    }


def run_size(
    blocks: int,
    sources: int,
    rounds: int,
    snapshot_dir: Path | None,
    snapshot_max: int | None = None,
) -> dict[str, Any]:
    """Every figure for one store of about ``blocks`` held blocks over ``sources`` sources; the
    snapshot's only up to ``snapshot_max`` held blocks."""
    per_source = blocks // sources
    held_queries = _queries(QUERY_PROMPTS, 0)
    query_blocks = QUERY_PROMPTS * QUERY_TOKENS // PAGE
    if per_source < query_blocks:
        raise ScaleBenchError(
            f"blocks: {blocks} over {sources} sources is under {query_blocks} a source"
        )
    template = RecordTemplate(per_source - query_blocks, held_queries)
    gc.collect()
    before = _rss_bytes()
    store = ReplicaStore()
    store.enable_prefix_index()
    ingest_cpu = 0.0
    ingest_wall = 0.0
    record_bytes = 0
    for source in range(sources):
        record = template.record(source)
        record_bytes += len(record)
        started, started_cpu = time.perf_counter(), _cpu_s()
        store.apply_wire(decode_wire(record, MAX_RECORD_BYTES))
        ingest_wall += time.perf_counter() - started
        ingest_cpu += _cpu_s() - started_cpu
    del record, template
    held = sum(store.block_count(f"s{s:0{NAME_DIGITS}d}") for s in range(sources))
    rss = _rss_bytes() - before
    queries = held_queries + _queries(QUERY_PROMPTS, QUERY_PROMPTS)
    result: dict[str, Any] = {
        "sources": sources,
        "held_blocks": held,
        "record_bytes_per_block": record_bytes / held,
        "ingest_blocks_per_s": held / ingest_wall,
        "ingest_blocks_per_cpu_s": held / ingest_cpu,
        "rss_bytes_per_block": rss / held,
        "heap_bytes_per_block": store.heap_bytes() / held,
        "holder_index_heap_bytes_per_block": store.prefix_index_heap_bytes() / held,
        **_match_latencies(store, queries, rounds),
    }
    expected = store.match_into(held_queries[0].tokens, None, PrefixMatch)
    if len(expected) != sources:
        raise ScaleBenchError(f"a held prompt matched on {len(expected)} of {sources} sources")
    if snapshot_max is not None and held > snapshot_max:
        # `snapshot()` holds the store, the snapshot and its copy as bytes at once
        result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        del store
        gc.collect()
        return result
    started = time.perf_counter()
    snapshot = store.snapshot()
    result["snapshot_write_s"] = time.perf_counter() - started
    result["snapshot_bytes_per_block"] = len(snapshot) / held
    if snapshot_dir is not None:
        path = snapshot_dir / f"scale-{blocks}.snapshot"
        started = time.perf_counter()
        path.write_bytes(snapshot)
        result["snapshot_file_write_s"] = time.perf_counter() - started
        path.unlink()
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    del store
    gc.collect()
    restored = ReplicaStore()
    restored.enable_prefix_index()
    started = time.perf_counter()
    restored.load(snapshot)
    result["snapshot_restore_s"] = time.perf_counter() - started
    again = restored.match_into(held_queries[0].tokens, None, PrefixMatch)
    if again != expected:
        raise ScaleBenchError("the restored store answers otherwise")
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    del restored, snapshot
    gc.collect()
    return result


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--blocks: {error}") from None
    if not sizes or any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"--blocks: expected positive counts, got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Run the sizes asked for; print (or write) the JSON of every figure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=_sizes, default=[1_000_000, 16_000_000])
    parser.add_argument("--sources", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=50, help="match rounds over the prompts")
    parser.add_argument("--snapshot-dir", type=Path, help="also time writing the snapshot here")
    parser.add_argument(
        "--snapshot-max-blocks",
        type=int,
        help="skip the snapshot write and restore above this many held blocks (it needs about "
        "twice its 93 B a block beside the store)",
    )
    parser.add_argument("--json", type=Path, help="write the JSON here (else stdout)")
    args = parser.parse_args(argv)
    sizes = {}
    for blocks in args.blocks:
        sizes[str(blocks)] = run_size(
            blocks, args.sources, args.rounds, args.snapshot_dir, args.snapshot_max_blocks
        )
        print(f"{blocks}: {json.dumps(sizes[str(blocks)])}", file=sys.stderr, flush=True)
    small, large = sizes[str(args.blocks[0])], sizes[str(args.blocks[-1])]
    out = {
        "sizes": sizes,
        "smallest": args.blocks[0],
        "largest": args.blocks[-1],
        "rss_per_block_ratio": large["rss_bytes_per_block"] / small["rss_bytes_per_block"],
        "match_p99_ratio": large["match_tokens_p99_us"] / small["match_tokens_p99_us"],
        "match_hashes_p99_ratio": large["match_hashes_p99_us"] / small["match_hashes_p99_us"],
    }
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
