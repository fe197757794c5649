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
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import HEARTBEAT, RUN_DURATION, LogAccess, MetricsEndpoint
from swa_es.options import field_of, nested, option
from swa_es.options import values as v
from swa_es.service.http_app import AppParts
from swa_es.service.http_server import start_http_server
from swa_es.service.log_access import open_log_within
from swa_es.service.service_metrics import bridge_families, registry_of
from swa_es.service.signals import cancel_on_signal


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeConfig:
    """``swa-es bridge`` (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    source: str = option(
        "source", v.text_value, "source id of the engine, the record key", metavar="ID"
    )
    duration_s: float | None = field_of(RUN_DURATION)
    heartbeat_s: float = field_of(HEARTBEAT)
    engine_timeout_s: float = option(
        "engine-timeout-s",
        v.positive_float,
        "declare the engine offline in the log once neither its stream nor its replay socket "
        "was heard for S seconds",
        default=10.0,
        metavar="S",
    )
    metrics: MetricsEndpoint = nested(MetricsEndpoint)
    endpoint: str = option(
        "zmq",
        v.zmq_endpoint,
        "the engine's KV-event PUB endpoint to subscribe to",
        metavar="ENDPOINT",
    )
    replay_endpoint: str | None = option(
        "replay",
        v.zmq_endpoint,
        "the engine's replay (ROUTER) endpoint; without it gaps cannot be filled",
        default=None,
        metavar="ENDPOINT",
        shown_default="none",
    )
    wire_format: str = option(
        "format",
        v.choice("sglang", "vllm", "auto"),
        "the engine's wire format: sglang, vllm or auto",
        default="auto",
        metavar="FMT",
    )
    page_size: int | None = option(
        "page-size",
        v.positive_int,
        "the engine's block size, for the epoch meta until the first stored block says it",
        default=None,
        metavar="TOKENS",
        shown_default="learned from the stream",
    )
    replay_timeout_s: float = option(
        "replay-timeout",
        v.positive_float,
        "seconds to wait for the engine's replay answer",
        default=5.0,
        metavar="S",
    )


COMMAND = Command("bridge", BridgeConfig)


def add_parser(subparsers: Any) -> None:
    """Add ``bridge`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="append an sglang/vLLM ZMQ KV-event stream to a log",
        description="Subscribe to an engine's KV-event publisher (--zmq), fill gaps from its "
        "replay socket (--replay), and append its batches to the log as --source. A gap the "
        "engine cannot fill reaches followers as a gap (the source becomes unknown); an engine "
        "restart starts a new epoch. SIGTERM flushes and exits 0.",
        run=run,
    )


def run(config: BridgeConfig) -> int:
    """Run ``bridge`` on the asyncio backend (pyzmq's asyncio sockets); the exit status."""
    return anyio.run(bridge, config, backend="asyncio")


async def bridge(config: BridgeConfig) -> int:
    """Bridge until the duration or a signal, flushing on the way out; the exit status."""
    async with AsyncExitStack() as stack:
        log = await open_log_within(config.log.url, config.log.open_timeout_s)
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
            host=config.metrics.host,
            port=config.metrics.port,
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
