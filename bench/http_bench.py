"""``POST /v1/match`` over real HTTP against the in-process ``PrefixIndex.match``, same run.

``--sources`` sources (default 64) each hold the pages of one ``--prompt-tokens`` prompt
(default 4096, page 16) in a ``ReplicaSet``; the routing API (Starlette on uvicorn, in this
process) answers ``/v1/match`` for that prompt. One httpx client sends ``--requests`` requests
one after another (latency, not concurrency); the baseline calls ``PrefixIndex.match`` directly
with the same token ids. Reported: requests/s and p50/p99 of both, and the ratio::

    .venv/bin/python bench/http_bench.py [--sources 64] [--prompt-tokens 4096] [--requests 500]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time

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


def source_batch(source: str, prompt: list[int]) -> EventBatch:
    hashes = chain_block_hashes(namespace_prior(None), prompt, PAGE)
    stored = BlockStored(tuple(hashes), None, tuple(prompt[: len(hashes) * PAGE]), PAGE)
    meta = BatchMeta(page_size=PAGE, sliding_window_size=256)
    return EventBatch(source, "e", 0, 0.0, (AllBlocksCleared(), stored), meta=meta)


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    return {
        "rps": len(ordered) / sum(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    prompt = [(i * 7919) % 50_000 for i in range(args.prompt_tokens)]
    views = StandardViews.create()
    for index in range(args.sources):
        views.replicas.apply(source_batch(f"w{index}", prompt))
    follower = Follower(MemoryLog(), views.all)
    parts = AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    direct: list[float] = []
    for _ in range(args.requests):
        start = time.perf_counter()
        found = views.prefix.match(prompt)
        direct.append(time.perf_counter() - start)
    assert len(found) == args.sources
    over_http: list[float] = []
    body = json.dumps({"token_ids": prompt, "extra_key": None}).encode()
    # TCP_NODELAY on the client: httpx writes headers and body separately, and Nagle plus the
    # server's delayed ACK would add ~40 ms to every request (what a router's client should do).
    transport = httpx.AsyncHTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    )
    async with (
        HttpServer(build_app(parts)) as server,
        httpx.AsyncClient(transport=transport) as client,
    ):
        url = f"http://127.0.0.1:{server.port}/v1/match"
        for _ in range(20):
            await client.post(url, content=body)
        for _ in range(args.requests):
            start = time.perf_counter()
            reply = await client.post(url, content=body)
            over_http.append(time.perf_counter() - start)
        assert len(reply.json()["sources"]) == args.sources
    http_stats, direct_stats = percentiles(over_http), percentiles(direct)
    return {
        "sources": args.sources,
        "prompt_tokens": args.prompt_tokens,
        "requests": args.requests,
        "http": http_stats,
        "in_process": direct_stats,
        "http_over_in_process_p50": http_stats["p50_ms"] / direct_stats["p50_ms"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--requests", type=int, default=500)
    result = anyio.run(main, parser.parse_args(), backend="asyncio")
    print(json.dumps(result, indent=2))
