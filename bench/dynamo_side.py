"""NVIDIA Dynamo's side of ``bench/dynamo_bench.py``: its KV-router index (``dynamo._core``
``RadixTree``) fed and asked the workload that ``dynamo_bench.py`` wrote, timed here.

Run by ``dynamo_bench.py`` with the interpreter of Dynamo's venv (``ai-dynamo-runtime``; it needs
nothing else, not even this project)::

    DYNAMO_PYTHON bench/dynamo_side.py WORKLOAD.json

Prints one JSON object: ingest seconds (one ``apply_event`` per engine event, each event's JSON
made beforehand), resident bytes before and after ingest, per-query latencies of a match from
token ids (Dynamo's own per-page hashing, then ``find_matches``) and from the page hashes given,
and every query's answer (worker -> matched blocks). ``dynamo_bench.py`` imports
``resident_bytes`` from here, so Dynamo is imported only where it is used.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import time
from typing import Any

U64 = (1 << 64) - 1


def resident_bytes() -> int:
    """This process's resident set now (not its peak), after the allocator returned what it
    holds free to the system (else an index growing into memory freed earlier, e.g. by the
    parsed workload, would not show)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def event_payloads(workload: dict[str, Any]) -> list[tuple[int, bytes]]:
    """Each engine event as (worker, the JSON ``apply_event`` reads), Dynamo's page hashes
    computed here (its router computes them when it converts an engine event)."""
    from dynamo._core import compute_block_hash_for_seq  # Dynamo's venv only

    page_size = workload["page_size"]
    payloads = []
    for event_id, event in enumerate(workload["events"]):
        if event[0] == "stored":
            _, worker, parent, hashes, tokens = event
            tokens_hashes = compute_block_hash_for_seq(tokens, page_size)
            blocks = [
                {"block_hash": h & U64, "tokens_hash": t}
                for h, t in zip(hashes, tokens_hashes, strict=True)
            ]
            data: dict[str, Any] = {
                "stored": {
                    "parent_hash": None if parent is None else parent & U64,
                    "blocks": blocks,
                }
            }
        else:
            _, worker, hashes = event
            data = {"removed": {"block_hashes": [h & U64 for h in hashes]}}
        payloads.append((worker, json.dumps({"event_id": event_id, "data": data}).encode()))
    return payloads


def main() -> None:
    from dynamo._core import RadixTree, compute_block_hash_for_seq  # Dynamo's venv only

    with open(sys.argv[1]) as source:
        workload = json.load(source)
    page_size = workload["page_size"]
    queries = workload["queries"]
    payloads = event_payloads(workload)
    del workload
    gc.collect()
    before = resident_bytes()
    tree = RadixTree()
    started = time.perf_counter()
    for worker, payload in payloads:
        tree.apply_event(worker, payload)
    ingest_s = time.perf_counter() - started
    gc.collect()
    after = resident_bytes()  # the payloads are still held: only the index grew
    del payloads
    token_us, hash_us, answers = [], [], []
    for tokens in queries:
        started = time.perf_counter()
        found = tree.find_matches(compute_block_hash_for_seq(tokens, page_size)).scores
        token_us.append((time.perf_counter() - started) * 1e6)
        answers.append({str(worker): blocks for (worker, _rank), blocks in found.items()})
    for tokens in queries:
        hashes = compute_block_hash_for_seq(tokens, page_size)
        started = time.perf_counter()
        tree.find_matches(hashes)
        hash_us.append((time.perf_counter() - started) * 1e6)
    json.dump(
        {
            "ingest_s": ingest_s,
            "rss_before": before,
            "rss_after": after,
            "token_match_us": token_us,
            "hash_match_us": hash_us,
            "answers": answers,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
