"""KV-aware routing of one workload across simulated workers, with the engines' actual reuse
reported back to the follower (``/v1/feedback``), before and after one source's events are
withheld (``swa-es demo --route``).

W workers (each a real ``SWARadixCache`` with its own ``Publisher``) share one log, in memory;
a follower applies it and serves its routing API over real HTTP on the loopback. The workload is
mostly one-turn requests on 16 shared 512-token documents, and every worker starts with each
document cached, so the same prefixes live on several workers. Each request is routed the way a
KV-aware router would: ask ``/v1/match`` for the prompt, send the request to the source the
index says reuses the most (usable tokens, else cached; of equals, the one that has served the
fewest requests), serve it there (the real cache's ``match_prefix`` length is what the engine
reused), and report source, reuse and the answer routed on to ``/v1/feedback`` (or, with
``report="prompt"``, the prompt, sent before the follower can hear of the request). The follower
catches up after each request, so while every worker publishes the index is exact.

After ``withhold_after`` requests one worker's events are withheld: its publisher is no longer
stepped (it keeps heartbeating, so the source still looks live, as behind a filter dropping its
batches), and with ``restart_withheld`` its engine restarts with an empty cache, which the
follower never hears of either. The index goes stale for that source. ``GET /v1/quality`` read
at the end of each phase gives that phase's incorrect-routing rate: zero while the index is
exact, rising once it is not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Final, Literal

from cache import SWARadixCache
from consumers import Follower
from log import MemoryLog
from swa_es.client import AsyncRoutingClient, Feedback, MatchAnswer
from swa_es.engine.engine import CacheConfig, build_cache
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatRequest, ChatWorkload
from swa_es.publish.config import PublisherConfig
from swa_es.publish.publisher import Publisher
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import follower_families, registry_of
from swa_es.service.views import StandardViews

ROUTING_CACHE: Final = CacheConfig(window_tokens=128, page_size=16, full_size=12288, swa_size=8192)
"""Pools holding the 16 shared documents and some conversations: workers evict as they serve."""
ReportForm = Literal["answer", "prompt"]


def routing_workload(seed: int) -> ChatWorkload:
    """The shared workload: mostly one-turn requests on 16 shared 512-token documents (system
    prompts, Zipf-popular), so the same prefixes live on several workers."""
    return ChatWorkload(
        seed,
        system_prompts=16,
        system_prompt_tokens=512,
        user_turn_tokens=32,
        assistant_turn_tokens=32,
        new_conversation_prob=0.8,
        max_conversation_tokens=1024,
        max_open_conversations=24,
    )


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of the run, as ``GET /v1/quality`` counted it (the difference of its
    readings at the phase's ends)."""

    name: str
    reports: int
    incorrect: int
    exact_predictions: int
    predicted_reports: int
    reused_tokens: int
    prompt_tokens: int
    by_source: dict[str, tuple[int, int]]
    """Per chosen source: (reports, wrong routes)."""

    @property
    def incorrect_rate(self) -> float:
        """Wrong routes per report (0 when none)."""
        return self.incorrect / self.reports if self.reports else 0.0

    def line(self) -> str:
        """One line for a terminal."""
        shares = ", ".join(
            f"{source} {count} ({bad} wrong)"
            for source, (count, bad) in sorted(self.by_source.items())
        )
        return (
            f"{self.name}: {self.reports} requests, {self.incorrect} routed wrongly "
            f"({100 * self.incorrect_rate:.1f}%), {self.exact_predictions} of "
            f"{self.predicted_reports} predictions exact, engines reused "
            f"{self.reused_tokens} of {self.prompt_tokens} prompt tokens; {shares}"
        )


def _phase(name: str, before: dict[str, Any], after: dict[str, Any]) -> Phase:
    def delta(document: dict[str, Any], *path: str) -> int:
        value: Any = document
        for key in path:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        return value if isinstance(value, int) else 0

    def both(*path: str) -> int:
        return delta(after, *path) - delta(before, *path)

    return Phase(
        name,
        both("all", "reports"),
        both("all", "incorrect"),
        both("all", "error_tokens", "exact"),
        both("all", "error_tokens", "count"),
        both("all", "reused_tokens"),
        both("all", "prompt_tokens"),
        {
            source: (both("sources", source, "reports"), both("sources", source, "incorrect"))
            for source in after["sources"]
            if both("sources", source, "reports")
        },
    )


@dataclass(slots=True)
class _Worker:
    source: str
    cache: SWARadixCache
    server: CacheWorker
    publisher: Publisher
    served: int = 0


def _choose(workers: list[_Worker], by_source: dict[str, _Worker], answer: MatchAnswer) -> _Worker:
    """The worker a KV-aware router sends a request to: of those the index says reuse the most
    (usable tokens, else cached), the one that has served the fewest requests."""
    best, candidates = 0, list(workers)
    for source, found in answer.sources.items():
        worker = by_source.get(source)
        if worker is None or not found.known:
            continue
        tokens = found.usable_tokens if found.usable_tokens is not None else found.cached_tokens
        tokens = tokens or 0
        if tokens > best:
            best, candidates = tokens, [worker]
        elif tokens == best and best > 0:
            candidates.append(worker)
    return min(candidates, key=lambda worker: worker.served)


class RoutedRun:
    """One routed run (see the module docstring); ``run()`` returns its phases."""

    def __init__(
        self,
        *,
        workers: int = 3,
        requests: int = 240,
        withhold_after: int | None = 120,
        withheld: str = "worker-0",
        seed: int = 0,
        cache: CacheConfig = ROUTING_CACHE,
        report: ReportForm = "answer",
        batch_reports: int = 16,
        restart_withheld: bool = True,
        progress: Callable[[str], None] = lambda line: None,
        token_ids: bool = True,
    ) -> None:
        self.workers = workers
        self.requests = requests
        self.withhold_after = withhold_after
        self.withheld = withheld
        self.seed = seed
        self.cache = cache
        self.report = report
        self.batch_reports = batch_reports
        self.restart_withheld = restart_withheld
        self.progress = progress
        self.publishing = PublisherConfig(token_ids=token_ids)

    async def run(self) -> list[Phase]:
        """Route every request, report each, and read the quality of each phase."""
        log = MemoryLog()
        views = StandardViews.create()
        follower = Follower(log, views.all)
        registry = registry_of(lambda: follower_families(follower.metrics, views))
        app = build_app(AppParts(registry, lambda: (True, "ok"), FollowerRouting(follower, views)))
        async with AsyncExitStack() as stack:
            workers = []
            for index in range(self.workers):
                cache = build_cache(self.cache)
                source = f"worker-{index}"
                publisher = await stack.enter_async_context(
                    Publisher(cache, log, source, config=self.publishing)
                )
                workers.append(_Worker(source, cache, CacheWorker(cache), publisher))
            await follower.catch_up()
            server = await stack.enter_async_context(HttpServer(app))
            client = await stack.enter_async_context(AsyncRoutingClient(server.url))
            self.progress(f"routing API at {server.url}")
            return await self._route(workers, follower, client)

    async def _route(
        self, workers: list[_Worker], follower: Follower, client: AsyncRoutingClient
    ) -> list[Phase]:
        by_source = {worker.source: worker for worker in workers}
        workload = routing_workload(self.seed)
        for worker in workers:  # every worker starts with every system prompt cached
            for number, prompt in enumerate(workload.system_prompts):
                worker.server.serve(ChatRequest(-1 - number, prompt, [1]))
            worker.publisher.step()
            await worker.publisher.flush()
        await follower.catch_up()
        pending: list[Feedback] = []
        readings = [("exact index", await client.quality())]
        withholding = False
        for number in range(self.requests):
            if number == self.withhold_after:
                await self._send(client, pending)
                readings.append((f"{self.withheld}'s events withheld", await client.quality()))
                withholding = True
                said = f"after {number} requests: {self.withheld}'s events are withheld"
                if self.restart_withheld:
                    by_source[self.withheld].cache.reset()  # its restart is withheld too
                    said += " and its engine restarts with an empty cache, unseen"
                self.progress(said)
            request = workload.next_request()
            reply = await client.match(request.prompt_ids)
            worker = _choose(workers, by_source, reply.answer)
            reused = self._serve(worker, request)
            if self.report == "prompt":
                # matched on arrival: sent before the follower can hear of this request
                pending.append(Feedback.of_prompt(worker.source, reused, request.prompt_ids))
                await self._send(client, pending)
            else:
                length = len(request.prompt_ids)
                pending.append(Feedback.of_answer(worker.source, reused, reply.answer, length))
                if len(pending) >= self.batch_reports:
                    await self._send(client, pending)
            if not (withholding and worker.source == self.withheld):
                worker.publisher.step()
                await worker.publisher.flush()
                await follower.catch_up()
        await self._send(client, pending)
        readings.append(("end", await client.quality()))
        return [
            _phase(name, before, after)
            for (name, before), (_, after) in itertools.pairwise(readings)
        ]

    @staticmethod
    def _serve(worker: _Worker, request: ChatRequest) -> int:
        """Serve ``request`` on ``worker``; the prompt tokens its cache reused."""
        worker.served += 1
        return worker.server.serve(request).matched_tokens

    @staticmethod
    async def _send(client: AsyncRoutingClient, pending: list[Feedback]) -> None:
        if pending:
            await client.feedback(pending)
            pending.clear()


async def run_routed(
    workers: int,
    cache: CacheConfig,
    seed: int,
    say: Callable[[str], None],
    *,
    token_ids: bool = True,
) -> int:
    """``swa-es demo --route``: a routed run of 240 requests on ``workers`` workers, its phases
    told to ``say``; the exit status (1 when the exact index routed any request wrongly).
    ``token_ids=False``: the workers publish without token ids (``--no-token-ids``)."""
    from swa_es.cli.exit_codes import EXIT_FAILED, EXIT_OK

    say(
        f"routed demo: {workers} workers, window {cache.window_tokens} tokens, page "
        f"{cache.page_size}, pools {cache.full_size} full / {cache.swa_size} SWA slots"
    )
    run = RoutedRun(workers=workers, cache=cache, seed=seed, progress=say, token_ids=token_ids)
    phases = await run.run()
    for phase in phases:
        say(phase.line())
    exact = phases[0]
    ok = exact.incorrect == 0 and exact.exact_predictions == exact.reports
    say(
        "verified: "
        + ("no wrong routes while the index was exact" if ok else "WRONG ROUTES ON AN EXACT INDEX")
    )
    return EXIT_OK if ok else EXIT_FAILED
