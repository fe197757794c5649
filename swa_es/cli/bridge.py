"""``swa-es bridge``: an engine's ZMQ KV-event stream (sglang or vLLM) appended to a log.

It subscribes to ``--zmq``, fills gaps from ``--replay``, and appends each engine batch as one
of our batches under ``--source`` (see ``swa_es.bridge.ingest``). SIGTERM or ``--duration-s``
flush what was appended and exit 0 (SIGINT: 130); ``--metrics-port`` serves ``/metrics``
(``swa_es_bridge_*`` counters) and ``/healthz``. On stderr it says what it subscribes to and
where it appends when it starts, warns while no engine is heard at ``--zmq`` (every
``--engine-timeout-s``), and sums up on exit what it received from where. On stdout: the
metrics port when served, and the counters when it stops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from prometheus_client.core import Metric

from swa_es.bridge.curve import curve_client
from swa_es.bridge.ingest import Bridge
from swa_es.cli import settings
from swa_es.cli.service_report import ServiceReport, listening
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import (
    HEARTBEAT,
    NO_TOKEN_IDS,
    RUN_DURATION,
    SOURCE,
    HttpAccess,
    HttpBounds,
    LogAccess,
    MetricsEndpoint,
)
from swa_es.engine.engine import CacheConfig
from swa_es.options import field_of, nested, opt_of, option
from swa_es.options import values as v
from swa_es.service.http_app import AppParts
from swa_es.service.http_server import start_http_server
from swa_es.service.log_access import open_log_within, redact
from swa_es.service.service_metrics import bridge_families, registry_of
from swa_es.service.signals import cancel_on_signal


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeConfig:
    """``swa-es bridge`` (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    source: str = field_of(SOURCE)
    duration_s: float | None = field_of(RUN_DURATION)
    heartbeat_s: float = field_of(HEARTBEAT)
    token_free: bool = field_of(NO_TOKEN_IDS)
    engine_timeout_s: float = option(
        "engine-timeout-s",
        v.positive_float,
        "declare the engine offline in the log once neither its stream nor its replay socket "
        "was heard for S seconds; while no engine is heard at all, warn every S seconds",
        default=10.0,
        metavar="S",
    )
    metrics: MetricsEndpoint = nested(MetricsEndpoint)
    http_access: HttpAccess = nested(HttpAccess)
    http_bounds: HttpBounds = nested(HttpBounds)
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
    page_size: int | None = field_of(
        opt_of(CacheConfig, "page_size"), default=None, shown_default="learned from the stream"
    )
    replay_timeout_s: float = option(
        "replay-timeout-s",
        v.positive_float,
        "seconds to wait for the engine's replay answer",
        default=5.0,
        metavar="S",
        old_flags=("replay-timeout",),
        old_variables=("replay-timeout",),
    )
    curve_server_key: str | None = option(
        "zmq-curve-server-key",
        v.text_value,
        "the engine's CURVE public key (z85, or a file holding it) where its sockets are CURVE "
        "servers; needs --zmq-curve-client-key-file",
        default=None,
        metavar="KEY",
        shown_default="off",
    )
    curve_client_key_file: Path | None = option(
        "zmq-curve-client-key-file",
        v.path,
        "the bridge's own CURVE key pair (a NAME.key_secret file as "
        "zmq.auth.create_certificates writes) for --zmq-curve-server-key",
        default=None,
        metavar="PATH",
        shown_default="off",
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
        "restart starts a new epoch. SIGTERM flushes and exits 0 (SIGINT: 130).",
        run=run,
    )


def run(config: BridgeConfig) -> int:
    """Run ``bridge`` on the asyncio backend (pyzmq's asyncio sockets); the exit status."""
    return anyio.run(bridge, config, backend="asyncio")


async def bridge(config: BridgeConfig) -> int:
    """Bridge until the duration or a signal, flushing on the way out; the exit status."""
    report = ServiceReport("bridge")
    engine: Bridge | None = None
    with report.failing():
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
                    silence_warning_s=config.engine_timeout_s,
                    curve=curve_client(config.curve_server_key, config.curve_client_key_file),
                    token_ids=not config.token_free,
                )
            )
            report.counts = partial(received, config, engine)
            server = await start_http_server(
                stack,
                AppParts(registry_of(_families(config, engine)), _health(engine)),
                host=config.metrics.host,
                port=config.metrics.port,
                security=config.http_access.security(),
                limits=config.http_bounds.limits(),
            )
            if server is not None:
                print(f"bridge {config.source}: metrics on port {server.port}", flush=True)
            replay = (
                "no --replay: gaps cannot be filled"
                if config.replay_endpoint is None
                else f"replay from {config.replay_endpoint}"
            )
            started = [
                f"subscribing to {config.endpoint} ({config.wire_format} format; {replay})",
                f"appending as source {config.source} to {redact(config.log.url)}",
                *listening("metrics", None if server is None else server.url),
            ]
            async with anyio.create_task_group() as background:
                running = anyio.CancelScope(
                    deadline=anyio.current_time() + (config.duration_s or math.inf)
                )
                await background.start(cancel_on_signal, running, report.stop)
                report.started(started)
                with running:
                    await engine.run()
                background.cancel_scope.cancel()
    assert engine is not None
    m = engine.metrics
    print(
        f"bridge {config.source}: {m.received} received, {m.replayed} replayed, "
        f"{m.batches_applied} applied, {m.gaps} gaps ({m.unfilled_gaps} unfilled), "
        f"{m.epochs} epochs, {m.undecodable} undecodable",
        flush=True,
    )
    return report.stopped(limit_reason="--duration-s reached")


def received(config: BridgeConfig, engine: Bridge) -> str:
    """The counts of the exit summary: what came from where, and what was appended."""
    m = engine.metrics
    connected = "" if engine.connected_once else ", never connected"
    replayed = (
        ""
        if config.replay_endpoint is None
        else f", {m.replayed} replayed from {config.replay_endpoint}"
    )
    return (
        f"{m.received} batches received from {config.endpoint}{connected}{replayed}; "
        f"{m.batches_applied} applied as {config.source}, {m.gaps} gaps "
        f"({m.unfilled_gaps} unfilled), {m.epochs} epochs, {m.undecodable} undecodable"
    )


def _families(config: BridgeConfig, engine: Bridge) -> Callable[[], list[Metric]]:
    def families() -> list[Metric]:
        publisher = engine.publisher
        tiers = engine.mirror.tiers.counters
        return bridge_families(
            config.source,
            {**engine.metrics.as_dict(), **tiers.as_dict()},
            None if publisher is None else publisher.metrics,
            tier_pages=tiers.pages,
        )

    return families


def _health(engine: Bridge) -> Callable[[], tuple[bool, str]]:
    def health() -> tuple[bool, str]:
        lost = engine.lost
        return True, "ok" if lost is None else f"ok; source state unknown: {lost}"

    return health
