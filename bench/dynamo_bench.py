"""swa-es's follower index beside NVIDIA Dynamo's KV-router index, on the same blocks, in one run.

One workload (``--workers`` engines of page ``--page-size``; each serves ``--requests`` prompts
of ``--prompt-tokens`` tokens opening with one of 8 shared system prompts; some requests' tails
are evicted later) is written once; then each side ingests every engine event into a fresh
index in a fresh process, one event per call, and answers ``--queries`` prompts (fully cached,
partly cached, new), first from token ids and then from the page hashes given:

- Dynamo: ``dynamo._core.RadixTree`` (PyPI ``ai-dynamo-runtime``, in its own venv, run by
  ``bench/dynamo_side.py``): ``apply_event`` of each event's JSON, ``find_matches``;
- swa-es: a ``ReplicaSet`` with a ``PrefixIndex`` (as a follower holds them): each event is one
  log record, decoded and applied (``decode_wire`` + ``apply_wire``); ``PrefixIndex.match`` and
  ``PrefixIndex.match_hashes``. Twice: as every follower but the stream out's holds them, keeping
  no token ids (``ReplicaSet(keep_tokens=False)``: ``ours``), and as ``follow --zmq-publish``
  holds them, keeping each block's token ids (``ours_keeping_tokens``).

The sides alternate, ``--rounds`` times each, and each figure is the side's best round. Every
answer (worker -> matched blocks) must agree, or the run fails. Resident memory is the process's
growth over the ingest (read from ``/proc/self/statm``) per held block (a block held by two
workers counts twice). ``--busy N`` runs N processes that spin on the CPU for as long as the
sides run (both sides alike), for the ingest "when busy"::

    .venv/bin/python bench/dynamo_bench.py --dynamo-python bench/.venv-dynamo/bin/python
        [--workers 64] [--requests 40] [--prompt-tokens 4096] [--page-size 16] [--queries 256]
        [--rounds 3] [--busy N] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dynamo_side import resident_bytes
from machine_load import CpuTicks, machine_row

from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    EventBatch,
    chain_block_hashes,
    decode_wire,
    encode_batch,
    namespace_prior,
)
from consumers import PrefixIndex, ReplicaSet

BENCH = Path(__file__).resolve().parent
SYSTEM_PROMPTS = 8
SYSTEM_TOKENS = 1024
VOCABULARY = 50_000


def make_workload(args: argparse.Namespace) -> dict[str, Any]:
    """Engine events (stores of the pages a request adds, later evictions of some tails) and
    the queries, as plain JSON both sides read."""
    rng = random.Random(args.seed)
    page = args.page_size
    prior = namespace_prior(None)
    systems = [[rng.randrange(VOCABULARY) for _ in range(SYSTEM_TOKENS)] for _ in range(8)]
    events: list[list[Any]] = []
    served: list[list[int]] = []
    for worker in range(args.workers):
        held: set[int] = set()
        tails: list[list[int]] = []
        for _ in range(args.requests):
            prompt = rng.choice(systems) + [
                rng.randrange(VOCABULARY) for _ in range(args.prompt_tokens - SYSTEM_TOKENS)
            ]
            hashes = chain_block_hashes(prior, prompt, page)
            first_new = next((i for i, h in enumerate(hashes) if h not in held), len(hashes))
            if first_new < len(hashes):
                parent = hashes[first_new - 1] if first_new else None
                events.append(
                    ["stored", worker, parent, hashes[first_new:], prompt[first_new * page :]]
                )
                held.update(hashes[first_new:])
                tails.append(hashes[first_new:])
            if len(served) < args.queries // 2 and rng.random() < 0.2:
                served.append(prompt)
            if tails and rng.random() < 0.25:  # evict the last quarter of an older request
                tail = tails.pop(rng.randrange(len(tails)))
                gone = tail[len(tail) - len(tail) // 4 :]
                if gone:
                    events.append(["removed", worker, gone[::-1]])
                    held.difference_update(gone)
    queries = list(served)
    while len(queries) < args.queries:
        shared = rng.choice([0, SYSTEM_TOKENS, SYSTEM_TOKENS + 512])
        base = rng.choice(served) if served else []
        queries.append(
            base[:shared]
            + [
                rng.randrange(VOCABULARY)
                for _ in range(args.prompt_tokens - min(shared, len(base)))
            ]
        )
    return {"page_size": page, "workers": args.workers, "events": events, "queries": queries}


def held_blocks(workload: dict[str, Any]) -> int:
    """Blocks held at the end, summed over workers."""
    held = 0
    for event in workload["events"]:
        held += len(event[3]) if event[0] == "stored" else -len(event[2])
    return held


def distinct_blocks(workload: dict[str, Any]) -> int:
    """Distinct blocks held at the end (a block held by several workers counts once)."""
    held: dict[int, int] = {}
    for event in workload["events"]:
        for block_hash in event[3] if event[0] == "stored" else event[2]:
            held[block_hash] = held.get(block_hash, 0) + (1 if event[0] == "stored" else -1)
    return sum(1 for count in held.values() if count)


def our_side(path: Path, keep_tokens: bool) -> dict[str, Any]:
    """swa-es's side, in this (fresh) process: the same measures as ``dynamo_side.py``; the
    replicas keep token ids when ``keep_tokens``."""
    workload = json.loads(path.read_text())
    page = workload["page_size"]
    queries = workload["queries"]
    meta = BatchMeta(page, page * 256, digest_alg=DIGEST_ALGORITHM)
    seqs = [0] * workload["workers"]
    opening = [
        encode_batch(EventBatch(f"w{w}", "e", 0, 0.0, (AllBlocksCleared(),), meta=meta))
        for w in range(workload["workers"])
    ]
    payloads = []
    for event in workload["events"]:
        worker = event[1]
        seqs[worker] += 1
        if event[0] == "stored":
            _, _, parent, hashes, tokens = event
            stored: BlockStored | BlockRemoved = BlockStored(
                tuple(hashes), parent, tuple(tokens), page
            )
        else:
            stored = BlockRemoved(tuple(event[2]))
        payloads.append(encode_batch(EventBatch(f"w{worker}", "e", seqs[worker], 0.0, (stored,))))
    del workload
    gc.collect()
    started = time.perf_counter()
    for payload in payloads:  # decoding alone, its answers dropped: the ingest's first half
        decode_wire(payload)
    decode_s = time.perf_counter() - started
    gc.collect()
    before = resident_bytes()
    replicas = ReplicaSet(keep_tokens=keep_tokens)
    prefix = PrefixIndex(replicas)
    for payload in opening:
        replicas.apply_wire(decode_wire(payload))
    started = time.perf_counter()
    for payload in payloads:
        replicas.apply_wire(decode_wire(payload))
    ingest_s = time.perf_counter() - started
    gc.collect()
    after = resident_bytes()  # the payloads are still held: only the index grew
    del payloads
    tables_bytes = replicas.store.heap_bytes()  # the per-source block tables (token ids too)
    holders_bytes = replicas.store.prefix_index_heap_bytes()  # the prefix index's holder index
    token_us, hash_us, answers = [], [], []
    for tokens in queries:
        started = time.perf_counter()
        found = prefix.match(tokens)
        token_us.append((time.perf_counter() - started) * 1e6)
        answers.append({s[1:]: m.full_tokens // page for s, m in found.items() if m.full_tokens})
    prior = namespace_prior(None)
    for tokens in queries:
        hashes = chain_block_hashes(prior, tokens, page)
        started = time.perf_counter()
        prefix.match_hashes(hashes, page)
        hash_us.append((time.perf_counter() - started) * 1e6)
    return {
        "ingest_s": ingest_s,
        "decode_s": decode_s,
        "rss_before": before,
        "rss_after": after,
        "tables_heap_bytes": tables_bytes,
        "holders_heap_bytes": holders_bytes,
        "token_match_us": token_us,
        "hash_match_us": hash_us,
        "answers": answers,
    }


def run_side(command: list[str]) -> dict[str, Any]:
    """One side's process and its JSON."""
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU while inside."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def summary(runs: list[dict[str, Any]], blocks: int, stored_blocks: int) -> dict[str, float]:
    """A side's best round of each figure (ours adds the median share of decoding)."""
    figures = {
        "ingest_blocks_per_s": max(stored_blocks / r["ingest_s"] for r in runs),
        "token_match_p50_us": min(statistics.median(r["token_match_us"]) for r in runs),
        "token_match_p99_us": min(
            statistics.quantiles(r["token_match_us"], n=100)[98] for r in runs
        ),
        "hash_match_p50_us": min(statistics.median(r["hash_match_us"]) for r in runs),
        "hash_match_p99_us": min(statistics.quantiles(r["hash_match_us"], n=100)[98] for r in runs),
        "rss_bytes_per_held_block": min((r["rss_after"] - r["rss_before"]) / blocks for r in runs),
    }
    if all("decode_s" in r for r in runs):  # ours: what share of the ingest is decoding
        figures["decode_share_of_ingest"] = statistics.median(
            r["decode_s"] / r["ingest_s"] for r in runs
        )
        # ours: where the resident bytes are (allocated capacity, the same in every round)
        figures["tables_heap_bytes_per_held_block"] = runs[0]["tables_heap_bytes"] / blocks
        figures["holders_heap_bytes_per_held_block"] = runs[0]["holders_heap_bytes"] / blocks
    return figures


def ratios(ours: dict[str, float], dynamo: dict[str, float]) -> dict[str, float]:
    """Our figures over Dynamo's."""
    return {
        "ingest": ours["ingest_blocks_per_s"] / dynamo["ingest_blocks_per_s"],
        "token_match_p50": ours["token_match_p50_us"] / dynamo["token_match_p50_us"],
        "hash_match_p50": ours["hash_match_p50_us"] / dynamo["hash_match_p50_us"],
        "rss_per_held_block": ours["rss_bytes_per_held_block"] / dynamo["rss_bytes_per_held_block"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dynamo-python", help="the interpreter of Dynamo's venv")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--busy", type=int, default=0, help="processes spinning on the CPU while the sides run"
    )
    parser.add_argument("--json", help="write the result here too")
    parser.add_argument("--side", choices=["ours"], help=argparse.SUPPRESS)
    parser.add_argument("--workload", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--keep-tokens", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side == "ours":
        json.dump(our_side(args.workload, args.keep_tokens), sys.stdout)
        return
    if args.busy < 0:
        parser.error(f"--busy: expected 0 or more processes, got {args.busy}")
    if not args.dynamo_python:
        parser.error("--dynamo-python is required (bash bench/setup_dynamo.sh makes the venv)")
    workload = make_workload(args)
    blocks = held_blocks(workload)
    distinct = distinct_blocks(workload)
    stored = sum(len(e[3]) for e in workload["events"] if e[0] == "stored")
    events = len(workload["events"])
    ticks = CpuTicks.now()
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "workload.json"
        path.write_text(json.dumps(workload))
        del workload
        ours_cmd = [sys.executable, __file__, "--side", "ours", "--workload", str(path)]
        keeping_cmd = [*ours_cmd, "--keep-tokens"]
        dynamo_cmd = [args.dynamo_python, str(BENCH / "dynamo_side.py"), str(path)]
        ours_runs, keeping_runs, dynamo_runs = [], [], []
        with busy(args.busy):
            for _ in range(args.rounds):
                dynamo_runs.append(run_side(dynamo_cmd))
                ours_runs.append(run_side(ours_cmd))
                keeping_runs.append(run_side(keeping_cmd))
    disagreements = sum(
        o != d
        for runs in (ours_runs, keeping_runs)
        for run_o, run_d in zip(runs, dynamo_runs, strict=True)
        for o, d in zip(run_o["answers"], run_d["answers"], strict=True)
    )
    if disagreements:
        raise SystemExit(f"the indexes disagree on {disagreements} answers")
    ours, dynamo = summary(ours_runs, blocks, stored), summary(dynamo_runs, blocks, stored)
    keeping = summary(keeping_runs, blocks, stored)
    result = {
        "workers": args.workers,
        "page_size": args.page_size,
        "prompt_tokens": args.prompt_tokens,
        "held_blocks": blocks,
        "distinct_held_blocks": distinct,
        "stored_blocks": stored,
        "events": events,
        "answers_compared": len(ours_runs[0]["answers"]) * args.rounds * 2,
        "busy_processes": args.busy,
        "ours": ours,
        "ours_keeping_tokens": keeping,
        "dynamo": dynamo,
        "ratios": ratios(ours, dynamo),
        "ratios_keeping_tokens": ratios(keeping, dynamo),
        "machine": machine_row(ticks),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
