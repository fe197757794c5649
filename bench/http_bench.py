"""``POST /v1/match`` over real HTTP against the in-process ``PrefixIndex.match``, same run.

``--sources`` sources (default 64) each hold the pages of one ``--prompt-tokens`` prompt
(default 4096, page 16) in a ``ReplicaSet``; the routing API (Starlette on uvicorn, in this
process, as ``swa-es follow --http-port`` serves it) answers ``/v1/match`` for that prompt. The
client is another process, as a router is: httpx on one keep-alive connection sends
``--requests`` requests one after another (latency), then ``--concurrency`` connections send
them at once (throughput). The baseline calls ``PrefixIndex.match`` directly with the same
token ids. Reported: requests/s and p50/p99 of each, and the ratios::

    .venv/bin/python bench/http_bench.py [--sources 64] [--prompt-tokens 4096] [--requests 2000]
        [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import anyio
import httpx

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockStored,
    EventBatch,
    chain_block_hashes,
    namespace_prior,
)
from consumers import Follower
from log import MemoryLog
from swa_es.service.http_app import AppParts, HttpServer, build_app
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews

PAGE = 16
WARMUP_REQUESTS = 50


def source_batch(source: str, prompt: list[int]) -> EventBatch:
    hashes = chain_block_hashes(namespace_prior(None), prompt, PAGE)
    stored = BlockStored(tuple(hashes), None, tuple(prompt[: len(hashes) * PAGE]), PAGE)
    meta = BatchMeta(page_size=PAGE, sliding_window_size=256)
    return EventBatch(source, "e", 0, 0.0, (AllBlocksCleared(), stored), meta=meta)


def latency_stats(samples_s: list[float], elapsed_s: float) -> dict[str, float]:
    """requests/s over ``elapsed_s``, and the p50/p99 of the samples in milliseconds."""
    ordered = sorted(samples_s)
    return {
        "rps": len(ordered) / elapsed_s,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


# --- the client process ---------------------------------------------------------------------


def sequential(url: str, body: bytes, requests: int) -> dict[str, float]:
    """One connection, one request after another."""
    samples: list[float] = []
    with httpx.Client() as client:
        for _ in range(WARMUP_REQUESTS):
            client.post(url, content=body).raise_for_status()
        started = time.perf_counter()
        for _ in range(requests):
            start = time.perf_counter()
            reply = client.post(url, content=body)
            samples.append(time.perf_counter() - start)
            reply.raise_for_status()
        elapsed = time.perf_counter() - started
    return latency_stats(samples, elapsed)


async def concurrent(url: str, body: bytes, requests: int, connections: int) -> dict[str, float]:
    """``connections`` connections, each sending its share one after another."""
    samples: list[float] = []
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                start = time.perf_counter()
                reply = await client.post(url, content=body)
                samples.append(time.perf_counter() - start)
                reply.raise_for_status()

        async with anyio.create_task_group() as warm:  # open every connection first
            for _ in range(connections):
                warm.start_soon(worker, WARMUP_REQUESTS // connections + 1)
        samples.clear()
        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for _ in range(connections):
                tasks.start_soon(worker, requests // connections)
        elapsed = time.perf_counter() - started
    return latency_stats(samples, elapsed)


def client_main(url: str, prompt_tokens: int, requests: int, connections: int) -> None:
    body = json.dumps({"token_ids": prompt(prompt_tokens), "extra_key": None}).encode()
    result = {
        "sequential": sequential(url, body, requests),
        "concurrent": anyio.run(concurrent, url, body, requests, connections),
    }
    print(json.dumps(result), flush=True)


# --- the server process -----------------------------------------------------------------------


def prompt(tokens: int) -> list[int]:
    return [(i * 7919) % 50_000 for i in range(tokens)]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tokens = prompt(args.prompt_tokens)
    views = StandardViews.create()
    for index in range(args.sources):
        views.replicas.apply(source_batch(f"w{index}", tokens))
    follower = Follower(MemoryLog(), views.all)
    parts = AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    direct: list[float] = []
    started = time.perf_counter()
    for _ in range(args.requests):
        start = time.perf_counter()
        found = views.prefix.match(tokens)
        direct.append(time.perf_counter() - start)
    direct_stats = latency_stats(direct, time.perf_counter() - started)
    assert len(found) == args.sources
    async with HttpServer(build_app(parts)) as server:
        url = f"http://127.0.0.1:{server.port}/v1/match"
        async with httpx.AsyncClient() as probe:
            check = await probe.post(url, json={"token_ids": tokens, "extra_key": None})
        assert len(check.json()["sources"]) == args.sources, check.text
        command = [sys.executable, __file__, "--client", url]
        command += ["--prompt-tokens", str(args.prompt_tokens), "--requests", str(args.requests)]
        command += ["--concurrency", str(args.concurrency)]
        with anyio.fail_after(600):
            client = await anyio.run_process(command, stderr=None)
    over_http = json.loads(client.stdout)
    return {
        "sources": args.sources,
        "prompt_tokens": args.prompt_tokens,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "in_process": direct_stats,
        "http_sequential": over_http["sequential"],
        "http_concurrent": over_http["concurrent"],
        "http_sequential_over_in_process_p50": over_http["sequential"]["p50_ms"]
        / direct_stats["p50_ms"],
        "in_process_over_http_concurrent_rps": direct_stats["rps"] / over_http["concurrent"]["rps"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.client:
        client_main(
            arguments.client, arguments.prompt_tokens, arguments.requests, arguments.concurrency
        )
    else:
        result = anyio.run(main, arguments, backend="asyncio")
        print(json.dumps(result, indent=2))
