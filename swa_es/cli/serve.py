"""``swa-es serve``: one primary worker loop publishing its cache's events to a log.

It serves the synthetic workload (any ``Engine`` would do) until ``--duration-s`` or
``--requests`` is reached, or SIGTERM/SIGINT arrives; then it flushes the publisher, writes its
final status (``flushed: true`` and the primary's digest, which a follower that caught up must
match), appends an offline marker (followers answer the source as offline from then on) and
exits 0 (130 after SIGINT). While idle it appends a heartbeat every ``--heartbeat-s``.
``--metrics-port`` serves ``/metrics`` and ``/healthz`` meanwhile. It says on stderr where it
appends and listens when it starts, and sums up its run when it stops; its result (requests
served and the primary's digest) is its one line on stdout.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from prometheus_client.core import Metric

from swa_es.cli import settings
from swa_es.cli.service_report import ServiceReport, check_status_file, listening
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import (
    HEARTBEAT,
    NO_TOKEN_IDS,
    RUN_DURATION,
    SEED,
    SOURCE,
    STATUS_EVERY,
    STATUS_FILE,
    HttpAccess,
    HttpBounds,
    LogAccess,
    MetricsEndpoint,
)
from swa_es.engine.engine import CacheConfig, Engine, synthetic_engine
from swa_es.engine.primary import PrimaryProgress, run_primary
from swa_es.options import field_of, nested, option
from swa_es.options import values as v
from swa_es.publish.config import PublisherConfig
from swa_es.publish.publisher import Publisher
from swa_es.service.http_app import AppParts
from swa_es.service.http_server import start_http_server
from swa_es.service.log_access import open_log_within, redact
from swa_es.service.service_metrics import publisher_families, registry_of
from swa_es.service.signals import Stop, cancel_on_signal
from swa_es.service.status_file import write_status, write_status_every

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """``swa-es serve``: one primary (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    cache: CacheConfig = nested(CacheConfig)
    seed: int = field_of(SEED)
    source: str = field_of(SOURCE, default="worker-0")
    duration_s: float | None = field_of(RUN_DURATION)
    max_requests: int | None = option(
        "requests",
        v.positive_int,
        "requests to serve, then flush and exit",
        default=None,
        metavar="N",
        shown_default="no limit",
    )
    rate_rps: float | None = option(
        "rate",
        v.positive_float,
        "requests per second",
        default=None,
        metavar="RPS",
        shown_default="as fast as it goes",
    )
    heartbeat_s: float = field_of(HEARTBEAT)
    token_free: bool = field_of(NO_TOKEN_IDS)
    metrics: MetricsEndpoint = nested(MetricsEndpoint)
    http_access: HttpAccess = nested(HttpAccess)
    http_bounds: HttpBounds = nested(HttpBounds)
    status_file: Path | None = field_of(STATUS_FILE)
    status_every_s: float = field_of(STATUS_EVERY)


COMMAND = Command("serve", ServeConfig)


def add_parser(subparsers: Any) -> None:
    """Add ``serve`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="one primary worker loop publishing to a log",
        description="Serve the synthetic workload on one cache and publish its events. Stops "
        "after --duration-s / --requests, or on SIGTERM/SIGINT, after flushing.",
        run=run,
    )


def run(config: ServeConfig) -> int:
    """Run ``serve`` on the asyncio backend (aiokafka needs asyncio); the exit status."""
    return anyio.run(serve, config, backend="asyncio")


class PrimaryService:
    """One primary: an engine, its publisher, progress, and what it reports."""

    def __init__(
        self, config: ServeConfig, engine: Engine, publisher: Publisher, stop: Stop | None = None
    ) -> None:
        self.config = config
        self.engine = engine
        self.publisher = publisher
        self.stop = Stop() if stop is None else stop
        self.progress = PrimaryProgress()
        self.flushed = False
        self.metrics_port: int | None = None

    def status(self) -> dict[str, Any]:
        """The status document (``digest`` is comparable once ``flushed`` is true)."""
        return {
            "role": "primary",
            "source": self.config.source,
            "pid": os.getpid(),
            "updated_at": time.time(),
            "requests": self.progress.requests,
            "epoch": self.publisher.epoch,
            "digest": self.engine.cache.state_digest(),
            "flushed": self.flushed,
            "metrics_port": self.metrics_port,
            "publisher": self.publisher.metrics.as_dict(),
        }

    def metric_families(self) -> list[Metric]:
        """What ``/metrics`` exports."""
        cache = self.engine.cache
        return publisher_families(
            self.publisher.metrics, self.progress.requests, cache.total_size()
        )

    def health(self) -> tuple[bool, str]:
        """``/healthz``: unhealthy once the publisher's append task died."""
        if self.publisher.metrics.failed:
            return False, "publisher failed"
        return True, "ok"

    async def serve(self, started: Callable[[], None] = lambda: None) -> None:
        """Serve until the limits or a signal, then flush (``started`` is called once the
        signals are caught)."""
        c = self.config
        async with anyio.create_task_group() as background:
            serving = anyio.CancelScope(deadline=anyio.current_time() + (c.duration_s or math.inf))
            await background.start(cancel_on_signal, serving, self.stop)
            started()
            if c.status_file is not None:
                background.start_soon(
                    write_status_every, c.status_file, self.status, c.status_every_s
                )
            with serving:
                await run_primary(
                    self.engine,
                    self.publisher,
                    self.progress,
                    max_requests=c.max_requests,
                    rate_rps=c.rate_rps,
                )
            await self.publisher.flush(timeout_s=60.0)
            self.flushed = True
            background.cancel_scope.cancel()
        if c.status_file is not None:
            await write_status(c.status_file, self.status())

    def counts(self) -> str:
        """The counts of the exit summary."""
        metrics = self.publisher.metrics
        return (
            f"{self.progress.requests} requests as {self.config.source}, "
            f"{metrics.batches_published} batches appended "
            f"({metrics.discarded_batches} discarded), "
            f"digest {self.engine.cache.state_digest()}"
        )

    def limit_reason(self) -> str:
        """Which limit ended the run when no signal did."""
        limit = self.config.max_requests
        return (
            "--requests reached"
            if limit and self.progress.requests >= limit
            else "--duration-s reached"
        )


async def serve(config: ServeConfig) -> int:
    """Serve until the limits or a signal, flush, report; the exit status."""
    engine = synthetic_engine(config.cache, config.seed)
    report = ServiceReport("serve")
    service: PrimaryService | None = None
    check_status_file(config.status_file)

    def families() -> list[Metric]:
        return [] if service is None else service.metric_families()

    def health() -> tuple[bool, str]:
        return (False, "starting") if service is None else service.health()

    with report.failing():
        async with AsyncExitStack() as stack:
            # listen first: a port it cannot have fails before anything is appended
            metrics = await start_http_server(
                stack,
                AppParts(registry_of(families), health),
                host=config.metrics.host,
                port=config.metrics.port,
                security=config.http_access.security(),
                limits=config.http_bounds.limits(),
            )
            log = await open_log_within(config.log.url, config.log.open_timeout_s)
            await stack.enter_async_context(log)
            publisher_config = PublisherConfig(
                heartbeat_s=config.heartbeat_s,
                offline_on_close=True,
                token_ids=not config.token_free,
            )
            publisher = await stack.enter_async_context(
                Publisher(engine.cache, log, config.source, config=publisher_config)
            )
            service = PrimaryService(config, engine, publisher, report.stop)
            report.counts = service.counts
            service.metrics_port = None if metrics is None else metrics.port
            started = [
                f"serving as source {config.source}, appending to {redact(config.log.url)}",
                *listening("metrics", None if metrics is None else metrics.url),
                *([] if config.status_file is None else [f"status file {config.status_file}"]),
            ]
            await service.serve(partial(report.started, started))
    assert service is not None
    logger.info("served %d requests as %s", service.progress.requests, config.source)
    print(
        f"serve {config.source}: {service.progress.requests} requests, "
        f"digest {engine.cache.state_digest()}",
        flush=True,
    )
    return report.stopped(limit_reason=service.limit_reason())
