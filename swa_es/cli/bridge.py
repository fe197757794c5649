"""``swa-es bridge``: an engine's ZMQ KV-event stream (sglang or vLLM) appended to a log.

It subscribes to ``--zmq``, fills gaps from ``--replay``, and appends each engine batch as one
of our batches under ``--source`` (see ``swa_es.bridge.ingest``). SIGTERM/SIGINT or
``--duration`` flush what was appended and exit 0; ``--metrics-port`` serves ``/metrics``
(``swa_es_bridge_*`` counters) and ``/healthz``.
"""

from __future__ import annotations

import math
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
from prometheus_client.core import Metric

from swa_es.bridge.ingest import Bridge
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_OK
from swa_es.service.http_app import AppParts
from swa_es.service.http_server import start_http_server
from swa_es.service.log_access import open_log_within
from swa_es.service.service_metrics import bridge_families, registry_of
from swa_es.service.signals import cancel_on_signal


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeConfig:
    """``swa-es bridge`` (each field is a row of ``settings.SETTINGS``)."""

    endpoint: str
    replay_endpoint: str | None
    wire_format: str
    source: str
    log_url: str
    page_size: int | None
    replay_timeout_s: float
    heartbeat_s: float
    engine_timeout_s: float
    duration_s: float | None
    metrics_host: str
    metrics_port: int | None
    open_timeout_s: float


def add_parser(subparsers: Any) -> None:
    """Add ``bridge`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        "bridge",
        help="append an sglang/vLLM ZMQ KV-event stream to a log",
        description="Subscribe to an engine's KV-event publisher (--zmq), fill gaps from its "
        "replay socket (--replay), and append its batches to the log as --source. A gap the "
        "engine cannot fill reaches followers as a gap (the source becomes unknown); an engine "
        "restart starts a new epoch. SIGTERM flushes and exits 0.",
        config_type=BridgeConfig,
        run=run,
    )


def run(config: BridgeConfig) -> int:
    """Run ``bridge`` on the asyncio backend (pyzmq's asyncio sockets); the exit status."""
    return anyio.run(bridge, config, backend="asyncio")


async def bridge(config: BridgeConfig) -> int:
    """Bridge until the duration or a signal, flushing on the way out; the exit status."""
    async with AsyncExitStack() as stack:
        log = await open_log_within(config.log_url, config.open_timeout_s)
        await stack.enter_async_context(log)
        engine = await stack.enter_async_context(
            Bridge(
                log,
                endpoint=config.endpoint,
                replay_endpoint=config.replay_endpoint,
                source=config.source,
                wire_format=config.wire_format,
                page_size=config.page_size,
                replay_timeout_s=config.replay_timeout_s,
                heartbeat_s=config.heartbeat_s,
                engine_timeout_s=config.engine_timeout_s,
            )
        )

        def families() -> list[Metric]:
            publisher = engine.publisher
            tiers = engine.mirror.tiers.counters
            return bridge_families(
                config.source,
                {**engine.metrics.as_dict(), **tiers.as_dict()},
                None if publisher is None else publisher.metrics,
                tier_pages=tiers.pages,
            )

        def health() -> tuple[bool, str]:
            lost = engine.lost
            return True, "ok" if lost is None else f"ok; source state unknown: {lost}"

        port = await start_http_server(
            stack,
            AppParts(registry_of(families), health),
            host=config.metrics_host,
            port=config.metrics_port,
        )
        if port is not None:
            print(f"bridge {config.source}: metrics on port {port}", flush=True)
        async with anyio.create_task_group() as background:
            running = anyio.CancelScope(
                deadline=anyio.current_time() + (config.duration_s or math.inf)
            )
            background.start_soon(cancel_on_signal, running)
            with running:
                await engine.run()
            background.cancel_scope.cancel()
    m = engine.metrics
    print(
        f"bridge {config.source}: {m.received} received, {m.replayed} replayed, "
        f"{m.batches_applied} applied, {m.gaps} gaps ({m.unfilled_gaps} unfilled), "
        f"{m.epochs} epochs, {m.undecodable} undecodable",
        flush=True,
    )
    return EXIT_OK
