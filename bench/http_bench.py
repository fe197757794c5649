"""``POST /v1/match`` over real HTTP, each request form beside the in-process ``PrefixIndex.match``,
in one run on the same prompt.

``--sources`` sources (default 64) each hold the pages of one ``--prompt-tokens`` prompt
(default 4096, page 16). The server is its own process (``swa-es follow``'s HTTP stack: the
service's asyncio server with the httptools parser, a plain ``POST /v1/match`` answered by the
connection protocol itself); the clients are other processes, as routers are, started together
and released at once. Rows:

- ``in_process``: ``PrefixIndex.match`` called directly with the prompt's list of ids;
- ``json``: http.client with the JSON body ``{"token_ids": [...]}``, the reply parsed by orjson;
- ``binary``: ``swa_es.client.RoutingClient.match`` (little-endian u32 body, the binary answer
  read into typed answers);
  also against a server asking for a bearer token (``binary_1conn_bearer_token``: the server
  started with a token file, the client sending ``Authorization: Bearer``), beside the row
  without;
- ``binary_httpx``: the same binary body sent by ``httpx.Client``, the JSON answer parsed by
  orjson (to weigh the client);
- ``hashes``: ``RoutingClient.match_hashes`` (the prompt's block hashes, i64 body, the binary
  answer);
- ``batch16``: ``RoutingClient.match_batch`` with 16 prompts in one msgpack body;
- each HTTP form with 1 keep-alive connection, and json/binary/batch16 with ``--connections``,
  on the server ``swa-es follow`` runs (uvloop); ``binary`` also on the standard asyncio loop,
  and on a server answering every request through ASGI (``HttpServer(hot_route=False)``: the
  route as an ASGI handler, for comparison).

Per row: p50/p99 latency, requests/s, ``ms_per_request`` (wall time per request at that
concurrency: 1000 / requests/s), the server process's CPU seconds (from ``/proc/PID/stat``) and
requests per server CPU-second, the ratio of the row's p50 to the in-process p50, and the
machine's CPU steal share during the row::

    .venv/bin/python bench/http_bench.py [--sources 64] [--prompt-tokens 4096]
        [--requests 2000] [--connections 8] [--rounds 5] [--only FORM...] [--json-out PATH]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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
from machine_load import CpuTicks, machine_row

PAGE = 16
BATCH = 16
WARMUP_REQUESTS = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")
HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


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
    from swa_es.service.http_app import AppParts, build_app
    from swa_es.service.http_auth import BearerTokens, HttpSecurity
    from swa_es.service.http_server import HttpServer
    from swa_es.service.routing import FollowerRouting

    views = loaded_views(args.sources, prompt(args.prompt_tokens))
    follower = Follower(MemoryLog(), views.all)
    parts = AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    tokens = None if args.token_file is None else BearerTokens(path=args.token_file)
    security = HttpSecurity(tokens)

    async def run() -> None:
        app = build_app(parts)
        async with HttpServer(app, hot_route=not args.asgi_route, security=security) as server:
            print(json.dumps({"port": server.port, "pid": os.getpid()}), flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read)

    options = {"use_uvloop": True} if args.loop == "uvloop" else {}
    anyio.run(run, backend="asyncio", backend_options=options)


# --- the client processes ---------------------------------------------------------------------


def make_sender(form: str, url: str, tokens: list[int], token: str | None = None) -> Any:
    """A callable sending one request of ``form`` and reading its answer (``token``: the bearer
    token the server asks for; only the ``RoutingClient`` forms send one)."""
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
    routing = RoutingClient(url, timeout_s=30, token=token)
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
    """One client connection, for several rounds: on a line N, open a connection and warm it up,
    say warm, wait for go, send N requests, report the samples; stop at end of input."""
    tokens = prompt(spec["prompt_tokens"])
    print("ready", flush=True)
    for line in sys.stdin:
        count = int(line)
        send = make_sender(spec["form"], spec["url"], tokens, spec.get("token"))
        for _ in range(WARMUP_REQUESTS):
            send()
        print("warm", flush=True)
        sys.stdin.readline()
        samples: list[float] = []
        started = time.monotonic()
        for _ in range(count):
            start = time.perf_counter()
            send()
            samples.append(time.perf_counter() - start)
        ended = time.monotonic()
        print(json.dumps({"samples": samples, "started": started, "ended": ended}), flush=True)


@dataclass
class Tally:
    """What one row measured, summed over the rounds."""

    samples: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    steal_ticks: int = 0
    total_ticks: int = 0

    def count_ticks(self, since: CpuTicks | None) -> None:
        """Add the machine's CPU ticks (and stolen ones) since ``since``."""
        until = CpuTicks.now()
        if since is not None and until is not None:
            self.steal_ticks += until.steal - since.steal
            self.total_ticks += until.total - since.total

    def row(self, name: str, form: str, connections: int, prompts: int) -> dict[str, Any]:
        """The row: latency, throughput, server CPU and steal share."""
        stats = latency(self.samples, self.elapsed_s)
        cpu_s = self.cpu_s
        return {
            "name": name,
            "form": form,
            "connections": connections,
            "requests": len(self.samples),
            "prompts_per_request": prompts,
            **stats,
            "ms_per_request": 1000 / stats["rps"],
            "server_cpu_s": round(cpu_s, 3),
            "requests_per_server_cpu_s": len(self.samples) / cpu_s if cpu_s > 0 else None,
            "steal_share": (
                round(self.steal_ticks / self.total_ticks, 3) if self.total_ticks else None
            ),
        }


def server_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class HttpRow:
    """``connections`` client processes of ``form``, kept across rounds, against ``server``:
    its base URL, pid, event loop and route (see ``ROWS``)."""

    def __init__(
        self,
        name: str,
        form: str,
        connections: int,
        server: tuple[str, int, str, str],
        prompt_tokens: int,
        token: str | None = None,
    ) -> None:
        self.name, self.form, self.connections = name, form, connections
        url, self.pid, self.loop, self.route = server
        spec = {"form": form, "url": url, "prompt_tokens": prompt_tokens, "token": token}
        command = [sys.executable, __file__, "--worker", json.dumps(spec)]
        self.workers = [
            subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(connections)
        ]
        for process in self.workers:
            self._expect(process, "ready")
        self.tally = Tally()

    def _expect(self, process: subprocess.Popen[str], word: str) -> None:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == word, f"{self.name}: a client failed ({line!r})"

    def _say(self, line: str) -> None:
        for process in self.workers:
            assert process.stdin is not None
            process.stdin.write(line + "\n")
            process.stdin.flush()

    def round(self, requests: int) -> None:
        """Every connection sends its share of ``requests`` at once."""
        self._say(str(max(1, requests // self.connections)))
        for process in self.workers:
            self._expect(process, "warm")
        ticks = CpuTicks.now()
        cpu_before = server_cpu_s(self.pid)
        self._say("go")
        results = []
        for process in self.workers:
            assert process.stdout is not None
            results.append(json.loads(process.stdout.readline()))
        self.tally.cpu_s += server_cpu_s(self.pid) - cpu_before
        self.tally.count_ticks(ticks)
        for result in results:
            self.tally.samples.extend(result["samples"])
        self.tally.elapsed_s += max(r["ended"] for r in results) - min(
            r["started"] for r in results
        )

    def close(self) -> None:
        """End the client processes."""
        for process in self.workers:
            if process.stdin is not None:
                process.stdin.close()
        for process in self.workers:
            process.wait(timeout=60)

    def result(self) -> dict[str, Any]:
        """The row."""
        prompts = BATCH if self.form == "batch16" else 1
        row = self.tally.row(self.name, self.form, self.connections, prompts)
        return row | {"loop": self.loop, "route": self.route}


class InProcessRow:
    """``PrefixIndex.match`` called directly on the same prompt."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.tokens = prompt(args.prompt_tokens)
        self.views = loaded_views(args.sources, self.tokens)
        self.sources = args.sources
        for _ in range(WARMUP_REQUESTS):
            self.views.prefix.match(self.tokens)
        self.tally = Tally()

    def round(self, requests: int) -> None:
        """``requests`` matches, one after another."""
        match, tokens, samples = self.views.prefix.match, self.tokens, self.tally.samples
        ticks = CpuTicks.now()
        cpu_before = time.process_time()
        started = time.perf_counter()
        for _ in range(requests):
            start = time.perf_counter()
            found = match(tokens)
            samples.append(time.perf_counter() - start)
        self.tally.elapsed_s += time.perf_counter() - started
        self.tally.cpu_s += time.process_time() - cpu_before
        self.tally.count_ticks(ticks)
        assert len(found) == self.sources

    def result(self) -> dict[str, Any]:
        """The row."""
        return self.tally.row("in_process", "PrefixIndex.match", 0, 1)


ROWS = [
    ("json_1conn", "json", 1, "uvloop", "protocol"),
    ("binary_1conn", "binary", 1, "uvloop", "protocol"),
    ("binary_1conn_bearer_token", "binary", 1, "uvloop", "protocol_token"),
    ("binary_httpx_1conn", "binary_httpx", 1, "uvloop", "protocol"),
    ("hashes_1conn", "hashes", 1, "uvloop", "protocol"),
    ("batch16_1conn", "batch16", 1, "uvloop", "protocol"),
    ("json_{n}conn", "json", None, "uvloop", "protocol"),
    ("binary_{n}conn", "binary", None, "uvloop", "protocol"),
    ("batch16_{n}conn", "batch16", None, "uvloop", "protocol"),
    ("binary_1conn_asyncio_loop", "binary", 1, "asyncio", "protocol"),
    ("binary_{n}conn_asyncio_loop", "binary", None, "asyncio", "protocol"),
    ("binary_1conn_asgi_route", "binary", 1, "uvloop", "asgi"),
    ("binary_{n}conn_asgi_route", "binary", None, "uvloop", "asgi"),
]
"""(name, form, connections (None: ``--connections``), the server's event loop, and its route
for ``/v1/match``: ``protocol`` as ``swa-es follow`` serves it, ``protocol_token`` the same on
a server asking for a bearer token (``--http-token-file``), ``asgi`` for every request through
ASGI)."""


def start_server(
    args: argparse.Namespace, loop: str, route: str, token_file: Path
) -> tuple[subprocess.Popen[str], str, int]:
    """A server process on ``loop`` serving ``route`` (see ``ROWS``; ``protocol_token``: asking
    for the token in ``token_file``): (process, base URL, pid)."""
    command = [sys.executable, __file__, "--serve", "--loop", loop]
    if route == "asgi":
        command.append("--asgi-route")
    if route == "protocol_token":
        command += ["--token-file", str(token_file)]
    command += ["--sources", str(args.sources), "--prompt-tokens", str(args.prompt_tokens)]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    ready = json.loads(server.stdout.readline())
    return server, f"http://127.0.0.1:{ready['port']}", int(ready["pid"])


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Every row, the machine row and the run's settings. The rows take turns, round after
    round, so that a neighbour's burst on a shared machine falls on all of them alike."""
    started = CpuTicks.now()
    baseline = InProcessRow(args)
    servers: dict[tuple[str, str], tuple[subprocess.Popen[str], str, int]] = {}
    rows: list[HttpRow] = []
    scratch = tempfile.TemporaryDirectory(prefix="http_bench_")
    token = secrets.token_urlsafe(32)
    token_file = Path(scratch.name) / "tokens"
    token_file.write_text(f"# the benchmark's router\n{token}\n")
    token_file.chmod(0o600)
    try:
        for name, form, connections, loop, route in ROWS:
            if args.only and form not in args.only:
                continue
            if loop == "uvloop" and not HAVE_UVLOOP:
                continue
            if (loop, route) not in servers:
                servers[loop, route] = start_server(args, loop, route, token_file)
            _, url, pid = servers[loop, route]
            count = args.connections if connections is None else connections
            row = HttpRow(
                name.format(n=count),
                form,
                count,
                (url, pid, loop, route),
                args.prompt_tokens,
                token if route == "protocol_token" else None,
            )
            rows.append(row)
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            baseline.round(per_round)
            for row in rows:
                row.round(per_round)
    finally:
        for row in rows:
            row.close()
        for server, _, _ in servers.values():
            if server.stdin is not None:
                server.stdin.close()
            server.wait(timeout=30)
        scratch.cleanup()
    results = [baseline.result()]
    results += [row.result() for row in rows]
    for result in results:
        result["ratio"] = result["p50_ms"] / results[0]["p50_ms"]
        result["per_prompt_p50_ms"] = result["p50_ms"] / result["prompts_per_request"]
    return {
        "benchmark": "http_bench",
        "sources": args.sources,
        "prompt_tokens": args.prompt_tokens,
        "page_size": PAGE,
        "requests": args.requests,
        "rounds": args.rounds,
        "connections": args.connections,
        "rows": results,
        "machine": machine_row(started),
    }


def print_table(result: dict[str, Any]) -> None:
    """The rows as a table on stderr."""
    print(
        f"{result['sources']} sources, {result['prompt_tokens']}-token prompt, page {PAGE}",
        file=sys.stderr,
    )
    header = (
        f"{'row':<28} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'ms/req':>7} "
        f"{'req/srvCPUs':>11} {'ratio':>7} {'steal':>6}"
    )
    print(header, file=sys.stderr)
    for row in result["rows"]:
        per_cpu = row["requests_per_server_cpu_s"]
        print(
            f"{row['name']:<28} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['rps']:>8.0f} "
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
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=5, help="turns the rows take")
    parser.add_argument("--only", nargs="*", help="only the HTTP rows of these forms")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--asgi-route", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--token-file", type=Path, help=argparse.SUPPRESS)
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
