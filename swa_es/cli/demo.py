"""``swa-es demo``: W simulated workers and a follower in one event loop, then verification.

Each worker has its own ``SWARadixCache`` and ``Publisher`` and serves the deterministic chat
workload; a ``Follower`` with the standard views (replicas, prefix index, stats) applies the log
live beside them. When the time is up the workers stop, their publishers flush, the follower
catches up to the log's end and every replica's digest is compared with its primary's. A second,
fresh follower then restores from the newest snapshot the first one wrote plus the log tail,
and is compared too.
"""

from __future__ import annotations

import shutil
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from platformdirs import user_cache_dir
from rich.console import Console

from consumers import Follower, SnapshotStore
from log import EventLog
from log.directories import create_data_directory
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_FAILED, EXIT_OK
from swa_es.cli.live_view import Frame, WorkerRow, show_live
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import LOG, NO_TOKEN_IDS, OPEN_TIMEOUT, RUN_DURATION, SEED
from swa_es.engine.engine import CacheConfig, SyntheticEngine, synthetic_engine
from swa_es.engine.primary import PrimaryProgress, run_primary
from swa_es.options import field_of, nested, option
from swa_es.options import values as v
from swa_es.publish.config import PublisherConfig
from swa_es.publish.publisher import Publisher
from swa_es.service.log_access import open_log_within, redact
from swa_es.service.views import StandardViews


def default_data_dir() -> Path:
    """Where the demo keeps its log and snapshots unless told otherwise."""
    return Path(user_cache_dir("swa-es")) / "demo"


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoConfig:
    """``swa-es demo`` (each field an option or a group of them)."""

    log_url: str | None = field_of(LOG, default=None, shown_default="DATA/log")
    open_timeout_s: float = field_of(OPEN_TIMEOUT)
    data_dir: Path = option(
        "data",
        v.path,
        "demo data directory, holding log/ and snapshots/",
        default=default_data_dir(),
        metavar="DIR",
        shown_default="the user cache dir's swa-es/demo",
    )
    workers: int = option("workers", v.positive_int, "simulated workers", default=2, metavar="N")
    duration_s: float = field_of(RUN_DURATION, default=10.0)
    refresh_s: float = option(
        "refresh-s",
        v.positive_float,
        "live view refresh period in seconds",
        default=0.5,
        metavar="S",
        old_flags=("refresh",),
        old_variables=("refresh",),
    )
    cache: CacheConfig = nested(CacheConfig)
    seed: int = field_of(SEED)
    token_free: bool = field_of(NO_TOKEN_IDS)
    route: bool = option(
        "route",
        v.boolean,
        "instead, route one workload across the workers by asking a follower's /v1/match over "
        "HTTP, report each engine's actual reuse to /v1/feedback, and show the incorrect-routing "
        "rate with the index exact, then with worker-0's events withheld (see docs/routing.md)",
        default=False,
    )

    @property
    def own_log_url(self) -> str:
        """The demo's own FileLog, ``DATA/log``."""
        return (self.data_dir / "log").resolve().as_uri()

    @property
    def log(self) -> str:
        """The log URL the demo uses: ``--log``, else ``DATA/log``."""
        return self.log_url or self.own_log_url


COMMAND = Command("demo", DemoConfig)


def add_parser(subparsers: Any) -> None:
    """Add ``demo`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="simulated workers + follower, verified (the first command)",
        description="Run W simulated serving workers publishing to a log, a follower beside "
        "them, a live view, and verify replica == primary (exit 1 if not). Each run starts "
        "from an empty DATA/log and DATA/snapshots.",
        run=run,
    )


def run(config: DemoConfig) -> int:
    """Run the demo and print the verdict; exit 1 when a replica differs."""
    console = Console(highlight=False)
    if config.route:
        from swa_es.cli.demo_routing import run_routed

        def say(line: str) -> None:
            console.print(line, soft_wrap=True)

        return anyio.run(
            partial(run_routed, token_ids=not config.token_free),
            config.workers,
            config.cache,
            config.seed,
            say,
        )

    async def main() -> int:
        ok = await run_demo(config, console)
        verdict = "all replicas equal their primaries" if ok else "VERIFICATION FAILED"
        console.print(f"verified: {verdict}", soft_wrap=True)
        return EXIT_OK if ok else EXIT_FAILED

    return anyio.run(main, backend="asyncio")


@dataclass(slots=True)
class DemoWorker:
    """One simulated worker: its engine, publisher and progress."""

    source: str
    engine: SyntheticEngine
    publisher: Publisher
    progress: PrimaryProgress


@dataclass(frozen=True, slots=True)
class Verdict:
    """One replica compared with its primary."""

    source: str
    primary_digest: str
    replica_digest: str | None
    diverged: str | None

    @property
    def ok(self) -> bool:
        """Equal digests and not diverged."""
        return self.diverged is None and self.replica_digest == self.primary_digest


def verify(workers: list[DemoWorker], views: StandardViews) -> list[Verdict]:
    """Each worker's primary digest against the replica the follower holds."""
    verdicts = []
    for worker in workers:
        tree = views.replicas.get(worker.source)
        verdicts.append(
            Verdict(
                source=worker.source,
                primary_digest=worker.engine.cache.state_digest(),
                replica_digest=None if tree is None else tree.state_digest(),
                diverged=None if tree is None else tree.diverged,
            )
        )
    return verdicts


def sample_prompts(workers: list[DemoWorker], per_worker: int = 4) -> list[list[int]]:
    """Prompts to route: each worker's most popular system prompts plus a new turn."""
    prompts: list[list[int]] = []
    for worker in workers:
        turn = [7 + len(prompts)] * (2 * worker.engine.cache.page_size + 1)
        prompts.extend(p + turn for p in worker.engine.workload.system_prompts[:per_worker])
    return prompts


def route_agreement(workers: list[DemoWorker], views: StandardViews) -> tuple[int, int]:
    """(prompts on which the prefix index matched every worker's own cache, prompts asked).

    ``match_prefix`` only touches recency and may split nodes; neither changes any block, so
    this runs after the digests were compared and changes none of them.
    """
    prompts = sample_prompts(workers)
    agreed = 0
    for tokens in prompts:
        answers = views.prefix.match(tokens)
        agreed += all(
            (answers[w.source].swa_tokens if w.source in answers else 0)
            == len(w.engine.cache.match_prefix(tokens).indices)
            for w in workers
        )
    return agreed, len(prompts)


class Demo:
    """One run of the demo; ``run()`` returns whether every replica matched."""

    def __init__(self, config: DemoConfig, console: Console) -> None:
        self.config = config
        self.console = console
        self.views = StandardViews.create()
        self.workers: list[DemoWorker] = []
        self.started_s = time.monotonic()
        self.follower: Follower | None = None

    @property
    def snapshot_dir(self) -> Path:
        """Where the demo's follower writes snapshots."""
        return self.config.data_dir / "snapshots"

    async def _prepare_data_dir(self) -> None:
        """Start from an empty log and snapshot store (only the demo's own sub-directories)."""
        stale = [self.snapshot_dir] + (
            [self.config.data_dir / "log"] if self.config.log == self.config.own_log_url else []
        )
        for directory in stale:
            await anyio.to_thread.run_sync(shutil.rmtree, directory, True)
        await anyio.to_thread.run_sync(create_data_directory, self.snapshot_dir)

    def _frame(self) -> Frame:
        assert self.follower is not None
        rows = []
        for worker in self.workers:
            pub = worker.publisher.metrics
            stats = self.views.stats.get(worker.source)
            rows.append(
                WorkerRow(
                    source=worker.source,
                    requests=worker.progress.requests,
                    events=pub.events_published,
                    batches=pub.batches_published,
                    resyncs=pub.resyncs,
                    blocks=stats.blocks,
                    tombstones=stats.tombstones,
                    lag_batches=max(0, pub.batches_published - stats.churn.batches),
                )
            )
        metrics = self.follower.metrics
        return Frame(
            elapsed_s=time.monotonic() - self.started_s,
            duration_s=self.config.duration_s,
            rows=tuple(rows),
            applied_batches=metrics.batches_applied,
            divergences=metrics.divergences,
        )

    def _banner(self) -> None:
        c = self.config
        self.console.print(
            f"swa-es demo: {c.workers} workers, window {c.cache.window_tokens} tokens, page "
            f"{c.cache.page_size}, pools {c.cache.full_size} full / {c.cache.swa_size} SWA "
            f"slots, {c.cache.device}, {c.duration_s:g} s, log {redact(c.log)}",
            highlight=False,
            soft_wrap=True,
        )

    async def _open_workers(self, stack: AsyncExitStack, log: EventLog) -> None:
        for index in range(self.config.workers):
            source = f"worker-{index}"
            engine = synthetic_engine(self.config.cache, seed=self.config.seed + index)
            publisher = await stack.enter_async_context(
                Publisher(
                    engine.cache,
                    log,
                    source,
                    config=PublisherConfig(token_ids=not self.config.token_free),
                )
            )
            self.workers.append(DemoWorker(source, engine, publisher, PrimaryProgress()))

    async def _serve_for_duration(self) -> None:
        with anyio.move_on_after(self.config.duration_s):
            async with anyio.create_task_group() as primaries:
                for worker in self.workers:
                    primaries.start_soon(
                        run_primary, worker.engine, worker.publisher, worker.progress
                    )
        for worker in self.workers:
            await worker.publisher.flush(timeout_s=60.0)

    async def _run_live(self, follower: Follower) -> None:
        async with anyio.create_task_group() as background:
            await background.start(follower.run)
            background.start_soon(
                lambda: show_live(self.console, self._frame, refresh_s=self.config.refresh_s)
            )
            await self._serve_for_duration()
            background.cancel_scope.cancel()

    async def run(self) -> bool:
        """Serve, follow, verify; True when every replica equals its primary."""
        await self._prepare_data_dir()
        self._banner()
        async with AsyncExitStack() as stack:
            log = await open_log_within(self.config.log, self.config.open_timeout_s)
            await stack.enter_async_context(log)
            self.follower = Follower(
                log, self.views.all, snapshots=SnapshotStore(self.snapshot_dir)
            )
            await self._open_workers(stack, log)
            self.started_s = time.monotonic()
            await self._run_live(self.follower)
            await self.follower.catch_up()
            verdicts = verify(self.workers, self.views)
            self._report(verdicts)
            restored_ok = await self._check_restore(log)
            routed_ok = self._check_routing()
        return all(v.ok for v in verdicts) and restored_ok and routed_ok

    def _check_routing(self) -> bool:
        """The prefix index answers what each worker's own ``match_prefix`` returns."""
        agreed, asked = route_agreement(self.workers, self.views)
        first = self.views.prefix.match(sample_prompts(self.workers)[0])
        example = ", ".join(
            f"{source} {m.swa_tokens} usable / {m.full_tokens} cached"
            for source, m in sorted(first.items())
        )
        self.console.print(
            f"route: most popular system prompt + a new turn -> {example or 'nothing cached'}",
            highlight=False,
            soft_wrap=True,
        )
        self.console.print(
            f"route: the prefix index agrees with every worker's match_prefix on {agreed} of "
            f"{asked} sampled prompts: {'yes' if agreed == asked else 'NO'}",
            highlight=False,
            soft_wrap=True,
        )
        return agreed == asked

    async def _check_restore(self, log: EventLog) -> bool:
        """Restore a fresh follower from the newest snapshot the live one wrote (one is written
        now if it wrote none) plus the log tail, and compare again."""
        assert self.follower is not None
        if self.follower.metrics.snapshots_written == 0:
            await self.follower.snapshot()
        fresh = StandardViews.create()
        second = Follower(log, fresh.all, snapshots=SnapshotStore(self.snapshot_dir))
        info = await second.restore()
        ok = info is not None and all(v.ok for v in verify(self.workers, fresh))
        loaded = (
            "nothing"
            if info is None
            else (f"snapshot {info.path.name} (position {_position_text(info.position.offsets)})")
        )
        self.console.print(
            f"restore: a fresh follower loaded {loaded} and replayed "
            f"{second.metrics.records_read} of {self.follower.metrics.records_read} records: "
            f"digests match: {'yes' if ok else 'NO'}",
            highlight=False,
            soft_wrap=True,
        )
        return ok

    def _report(self, verdicts: list[Verdict]) -> None:
        assert self.follower is not None
        for worker, verdict in zip(self.workers, verdicts, strict=True):
            pub = worker.publisher.metrics
            detail = f" (diverged: {verdict.diverged})" if verdict.diverged else ""
            self.console.print(
                f"{worker.source}: {worker.progress.requests} requests, "
                f"{pub.events_published} events in {pub.batches_published} batches, "
                f"{pub.resyncs} resyncs; replica {verdict.replica_digest} vs primary "
                f"{verdict.primary_digest}: {'yes' if verdict.ok else 'NO'}{detail}",
                highlight=False,
                soft_wrap=True,
            )
        m = self.follower.metrics
        self.console.print(
            f"follower: {m.records_read} records, {m.batches_applied} batches, "
            f"{m.events_applied} events applied; {m.digests_checked} in-band digests checked, "
            f"{m.divergences} divergences, {m.duplicates_skipped} duplicates skipped",
            highlight=False,
            soft_wrap=True,
        )


def _position_text(offsets: dict[int, int]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items())) or "start"


async def run_demo(config: DemoConfig, console: Console) -> bool:
    """Run the demo; True when every replica (live and restored) equals its primary."""
    return await Demo(config, console).run()
