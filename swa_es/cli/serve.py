"""``swa-es serve``: one primary worker loop publishing its cache's events to a log.

It serves the synthetic workload (any ``Engine`` would do) until ``--duration`` or
``--requests`` is reached, or SIGTERM/SIGINT arrives; then it flushes the publisher, writes its
final status (``flushed: true`` and the primary's digest, which a follower that caught up must
match), appends an offline marker (followers answer the source as offline from then on) and
exits 0. While idle it appends a heartbeat every ``--heartbeat-s``. ``--metrics-port`` serves
``/metrics`` and ``/healthz`` meanwhile.
"""

from __future__ import annotations

import logging
import math
import os
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from prometheus_client.core import Metric

from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_OK
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import (
    HEARTBEAT,
    RUN_DURATION,
    SEED,
    STATUS_EVERY,
    STATUS_FILE,
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
from swa_es.service.log_access import open_log_within
from swa_es.service.service_metrics import publisher_families, registry_of
from swa_es.service.signals import cancel_on_signal
from swa_es.service.status_file import write_status, write_status_every

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """``swa-es serve``: one primary (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    cache: CacheConfig = nested(CacheConfig)
    seed: int = field_of(SEED)
    source: str = option(
        "source", v.text_value, "source id, the record key", default="worker-0", metavar="ID"
    )
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
    metrics: MetricsEndpoint = nested(MetricsEndpoint)
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
        "after --duration / --requests, or on SIGTERM/SIGINT, after flushing.",
        run=run,
    )


def run(config: ServeConfig) -> int:
    """Run ``serve`` on the asyncio backend (aiokafka needs asyncio); the exit status."""
    return anyio.run(serve, config, backend="asyncio")


class PrimaryService:
    """One primary: an engine, its publisher, progress, and what it reports."""

    def __init__(self, config: ServeConfig, engine: Engine, publisher: Publisher) -> None:
        self.config = config
        self.engine = engine
        self.publisher = publisher
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
            self.publisher.metrics,
            self.progress.requests,
            cache.total_size(),
            cache.state_digest(),
        )

    def health(self) -> tuple[bool, str]:
        """``/healthz``: unhealthy once the publisher's append task died."""
        if self.publisher.metrics.failed:
            return False, "publisher failed"
        return True, "ok"

    async def serve(self) -> None:
        """Serve until the limits or a signal, then flush."""
        c = self.config
        async with anyio.create_task_group() as background:
            serving = anyio.CancelScope(deadline=anyio.current_time() + (c.duration_s or math.inf))
            background.start_soon(cancel_on_signal, serving)
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


async def serve(config: ServeConfig) -> int:
    """Serve until the limits or a signal, flush, report; the exit status."""
    engine = synthetic_engine(config.cache, config.seed)
    async with AsyncExitStack() as stack:
        log = await open_log_within(config.log.url, config.log.open_timeout_s)
        await stack.enter_async_context(log)
        publisher_config = PublisherConfig(heartbeat_s=config.heartbeat_s, offline_on_close=True)
        publisher = await stack.enter_async_context(
            Publisher(engine.cache, log, config.source, config=publisher_config)
        )
        service = PrimaryService(config, engine, publisher)
        service.metrics_port = await start_http_server(
            stack,
            AppParts(registry_of(service.metric_families), service.health),
            host=config.metrics.host,
            port=config.metrics.port,
        )
        await service.serve()
    logger.info("served %d requests as %s", service.progress.requests, config.source)
    print(
        f"serve {config.source}: {service.progress.requests} requests, "
        f"digest {engine.cache.state_digest()}",
        flush=True,
    )
    return EXIT_OK
