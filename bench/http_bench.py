"""``POST /v1/match`` over real HTTP, each request form beside the in-process ``PrefixIndex.match``,
in one run on the same prompt.

``--sources`` sources (default 64) each hold the pages of one ``--prompt-tokens`` prompt
(default 4096, page 16). The server is its own process (``swa-es follow``'s HTTP stack: uvicorn
with the httptools parser, the hot route a plain ASGI handler); the clients are other processes,
as routers are, started together and released at once. Rows:

- ``in_process``: ``PrefixIndex.match`` called directly with the prompt's list of ids;
- ``json``: http.client with the JSON body ``{"token_ids": [...]}``, the reply parsed by orjson;
- ``binary``: ``swa_es.client.RoutingClient.match`` (little-endian u32 body, typed answers);
- ``binary_httpx``: the same binary body sent by ``httpx.Client`` (to weigh the client library);
- ``hashes``: ``RoutingClient.match_hashes`` (the prompt's block hashes, i64 body);
- ``batch16``: ``RoutingClient.match_batch`` with 16 prompts in one msgpack body;
- each HTTP form with 1 keep-alive connection, and json/binary/batch16 with ``--connections``.

Per row: p50/p99 latency, requests/s, ``ms_per_request`` (wall time per request at that
concurrency: 1000 / requests/s), the server process's CPU seconds (from ``/proc/PID/stat``) and
requests per server CPU-second, the ratio of the row's p50 to the in-process p50, and the
machine's CPU steal share during the row::

    .venv/bin/python bench/http_bench.py [--sources 64] [--prompt-tokens 4096]
        [--requests 2000] [--connections 8] [--loop asyncio|uvloop] [--json-out PATH]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

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
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_load import CpuTicks, machine_row, steal_share_since

PAGE = 16
BATCH = 16
WARMUP_REQUESTS = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")


def prompt(tokens: int) -> list[int]:
    """The benchmark's prompt: ``tokens`` ids."""
    return [(i * 7919) % 50_000 for i in range(tokens)]


def source_batch(source: str, tokens: list[int]) -> EventBatch:
    """A batch storing every whole page of ``tokens`` for ``source``."""
    hashes = chain_block_hashes(namespace_prior(None), tokens, PAGE)
    stored = BlockStored(tuple(hashes), None, tuple(tokens[: len(hashes) * PAGE]), PAGE)
    meta = BatchMeta(page_size=PAGE, sliding_window_size=256)
    return EventBatch(source, "e", 0, 0.0, (AllBlocksCleared(), stored), meta=meta)


def loaded_views(sources: int, tokens: list[int]) -> StandardViews:
    """Views where ``sources`` sources hold all of ``tokens``."""
    views = StandardViews.create()
    for index in range(sources):
        views.replicas.apply(source_batch(f"w{index}", tokens))
    return views


def latency(samples_s: list[float], elapsed_s: float) -> dict[str, float]:
    """requests/s over ``elapsed_s``, and the p50/p99 of the samples in milliseconds."""
    ordered = sorted(samples_s)
    return {
        "rps": len(ordered) / elapsed_s,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


# --- the server process -----------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """Serve the routing API on a free port; print {"port", "pid"}; stop when stdin closes."""
    from swa_es.service.http_app import AppParts, HttpServer, build_app
    from swa_es.service.routing import FollowerRouting

    views = loaded_views(args.sources, prompt(args.prompt_tokens))
    follower = Follower(MemoryLog(), views.all)
    parts = AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))

    async def run() -> None:
        async with HttpServer(build_app(parts)) as server:
            print(json.dumps({"port": server.port, "pid": os.getpid()}), flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read)

    options = {"use_uvloop": True} if args.loop == "uvloop" else {}
    anyio.run(run, backend="asyncio", backend_options=options)


# --- the client processes ---------------------------------------------------------------------


def make_sender(form: str, url: str, tokens: list[int]) -> Any:
    """A callable sending one request of ``form`` and reading its answer."""
    from swa_es.client import HashedPrompt, Prompt, RoutingClient

    host, port = url.split("//", 1)[1].split(":")
    if form == "json":
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        body = orjson.dumps({"token_ids": tokens, "extra_key": None})
        headers = {"Content-Type": "application/json"}

        def send_json() -> None:
            connection.request("POST", "/v1/match", body, headers)
            reply = connection.getresponse()
            data = reply.read()
            assert reply.status == 200, data
            orjson.loads(data)

        return send_json
    if form == "binary_httpx":
        import httpx

        client = httpx.Client(base_url=url, timeout=30)
        raw = b"".join(t.to_bytes(4, "little") for t in tokens)
        binary = {"Content-Type": "application/octet-stream"}

        def send_httpx() -> None:
            reply = client.post("/v1/match", content=raw, headers=binary)
            assert reply.status_code == 200, reply.text
            orjson.loads(reply.content)

        return send_httpx
    routing = RoutingClient(url, timeout_s=30)
    if form == "binary":
        return lambda: routing.match(tokens)
    if form == "hashes":
        hashes = chain_block_hashes(namespace_prior(None), tokens, PAGE)
        return lambda: routing.match_hashes(hashes, PAGE)
    if form == "batch16":
        prompts: list[Prompt | HashedPrompt] = [Prompt(tokens)] * BATCH
        return lambda: routing.match_batch(prompts)
    raise ValueError(f"unknown form {form!r}")


def worker(spec: dict[str, Any]) -> None:
    """One client connection: warm up, say ready, wait for go, send, report the samples."""
    send = make_sender(spec["form"], spec["url"], prompt(spec["prompt_tokens"]))
    for _ in range(WARMUP_REQUESTS):
        send()
    print("ready", flush=True)
    sys.stdin.readline()
    samples: list[float] = []
    started = time.monotonic()
    for _ in range(spec["requests"]):
        start = time.perf_counter()
        send()
        samples.append(time.perf_counter() - start)
    ended = time.monotonic()
    print(json.dumps({"samples": samples, "started": started, "ended": ended}), flush=True)


def server_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def http_row(
    name: str, form: str, connections: int, url: str, pid: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Run ``connections`` client processes of ``form`` at once; the row of their results."""
    per_connection = max(1, args.requests // connections)
    spec = {"form": form, "url": url, "prompt_tokens": args.prompt_tokens}
    spec["requests"] = per_connection
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    workers = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(connections)
    ]
    for process in workers:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", f"{name}: a client failed to start ({line!r})"
    ticks = CpuTicks.now()
    cpu_before = server_cpu_s(pid)
    for process in workers:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results = []
    for process in workers:
        out, _ = process.communicate(timeout=900)
        assert process.returncode == 0, f"{name}: a client failed"
        results.append(json.loads(out.strip().splitlines()[-1]))
    cpu_s = server_cpu_s(pid) - cpu_before
    samples = [s for result in results for s in result["samples"]]
    elapsed = max(r["ended"] for r in results) - min(r["started"] for r in results)
    stats = latency(samples, elapsed)
    prompts = BATCH if form == "batch16" else 1
    return {
        "name": name,
        "form": form,
        "connections": connections,
        "requests": len(samples),
        "prompts_per_request": prompts,
        **stats,
        "ms_per_request": 1000 / stats["rps"],
        "server_cpu_s": round(cpu_s, 3),
        "requests_per_server_cpu_s": len(samples) / cpu_s if cpu_s > 0 else None,
        "steal_share": steal_share_since(ticks),
    }


def in_process_row(args: argparse.Namespace) -> dict[str, Any]:
    """``PrefixIndex.match`` called directly on the same prompt."""
    tokens = prompt(args.prompt_tokens)
    views = loaded_views(args.sources, tokens)
    for _ in range(WARMUP_REQUESTS):
        views.prefix.match(tokens)
    ticks = CpuTicks.now()
    samples: list[float] = []
    cpu_before = time.process_time()
    started = time.perf_counter()
    for _ in range(args.requests):
        start = time.perf_counter()
        found = views.prefix.match(tokens)
        samples.append(time.perf_counter() - start)
    elapsed = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_before
    assert len(found) == args.sources
    stats = latency(samples, elapsed)
    return {
        "name": "in_process",
        "form": "PrefixIndex.match",
        "connections": 0,
        "requests": args.requests,
        "prompts_per_request": 1,
        **stats,
        "ms_per_request": 1000 / stats["rps"],
        "server_cpu_s": round(cpu_s, 3),
        "requests_per_server_cpu_s": args.requests / cpu_s if cpu_s > 0 else None,
        "steal_share": steal_share_since(ticks),
    }


ROWS = [
    ("json_1conn", "json", 1),
    ("binary_1conn", "binary", 1),
    ("binary_httpx_1conn", "binary_httpx", 1),
    ("hashes_1conn", "hashes", 1),
    ("batch16_1conn", "batch16", 1),
    ("json_{n}conn", "json", None),
    ("binary_{n}conn", "binary", None),
    ("batch16_{n}conn", "batch16", None),
]


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Every row, the machine row and the run's settings."""
    started = CpuTicks.now()
    baseline = in_process_row(args)
    command = [sys.executable, __file__, "--serve", "--loop", args.loop]
    command += ["--sources", str(args.sources), "--prompt-tokens", str(args.prompt_tokens)]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        url, pid = f"http://127.0.0.1:{ready['port']}", int(ready["pid"])
        rows = [baseline]
        for name, form, connections in ROWS:
            if args.only and form not in args.only:
                continue
            count = args.connections if connections is None else connections
            rows.append(http_row(name.format(n=count), form, count, url, pid, args))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)
    for row in rows:
        row["ratio"] = row["p50_ms"] / baseline["p50_ms"]
        row["per_prompt_p50_ms"] = row["p50_ms"] / row["prompts_per_request"]
    return {
        "benchmark": "http_bench",
        "sources": args.sources,
        "prompt_tokens": args.prompt_tokens,
        "page_size": PAGE,
        "requests": args.requests,
        "connections": args.connections,
        "loop": args.loop,
        "rows": rows,
        "machine": machine_row(started),
    }


def print_table(result: dict[str, Any]) -> None:
    """The rows as a table on stderr."""
    print(
        f"{result['sources']} sources, {result['prompt_tokens']}-token prompt, page {PAGE}, "
        f"loop {result['loop']}",
        file=sys.stderr,
    )
    header = (
        f"{'row':<20} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'ms/req':>7} "
        f"{'req/srvCPUs':>11} {'ratio':>7} {'steal':>6}"
    )
    print(header, file=sys.stderr)
    for row in result["rows"]:
        per_cpu = row["requests_per_server_cpu_s"]
        print(
            f"{row['name']:<20} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['rps']:>8.0f} "
            f"{row['ms_per_request']:>7.3f} {per_cpu or 0:>11.0f} {row['ratio']:>7.1f} "
            f"{row['steal_share'] if row['steal_share'] is not None else '-':>6}",
            file=sys.stderr,
        )
    print(f"machine: {result['machine']}", file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--only", nargs="*", help="only the HTTP rows of these forms")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve:
        serve(arguments)
    elif arguments.worker:
        worker(json.loads(arguments.worker))
    else:
        outcome = main(arguments)
        print_table(outcome)
        text = json.dumps(outcome, indent=2)
        if arguments.json_out is not None:
            arguments.json_out.write_text(text + "\n")
        print(text)
