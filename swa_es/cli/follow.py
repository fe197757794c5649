"""``swa-es follow``: a long-running follower with snapshots, ``/metrics``, ``/healthz`` and
``/readyz``.

It restores the newest valid snapshot (or replays from the beginning), then applies live
records until ``--duration-s`` or SIGTERM/SIGINT (exit 0; SIGINT: 130); on the way out it writes
a last snapshot and its final status (per-source replica digests, states, counters). On stderr
it says what it reads, writes and listens on (the bound ports, also for port 0) when it starts,
when it is restored and when ready (``/readyz`` turns 200: ``consumers.readiness``; and each
time it turns 503 or 200 again), and sums up its run when it stops; while it replays it shows
its progress (a bar on a terminal, else a line every few seconds). A source unheard for
``--source-timeout-s`` (no batch, no heartbeat), or one that marked itself offline, is answered
as offline; while the follower lags the log by more than ``--degraded-lag-records`` the others
are degraded. The snapshot store is a directory or a
``kafka://`` snapshot topic, which lets a follower on a machine with an empty disk bootstrap
after retention deleted the start of the event log.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from prometheus_client.core import Metric

from cache.events import DEFAULT_MAX_RECORD_BYTES
from consumers import Follower, SnapshotInfo
from consumers.progress import ReplayTracker
from consumers.readiness import FollowerReadiness, ReadyBounds
from swa_es.cli import settings
from swa_es.cli.progress import terminal_progress
from swa_es.cli.service_report import (
    ServiceReport,
    check_snapshot_directory,
    check_status_file,
    listening,
)
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import (
    NO_TOKEN_IDS,
    RUN_DURATION,
    SNAPSHOTS,
    STATUS_EVERY,
    STATUS_FILE,
    HttpAccess,
    HttpBounds,
    LogAccess,
    MetricsEndpoint,
)
from swa_es.egress.config import EgressConfig, ZmqServerSecurity, insecure_binds
from swa_es.options import field_of, nested, option
from swa_es.options import values as v
from swa_es.options.values import SettingError
from swa_es.service import metric_table
from swa_es.service.errors import ListenError
from swa_es.service.event_loop import fast_loop_options
from swa_es.service.http_app import AppParts
from swa_es.service.http_server import HttpServer, start_http_server
from swa_es.service.log_access import open_reader, open_snapshots, redact
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import (
    family,
    follower_families,
    recovery_families,
    registry_of,
    source_families,
)
from swa_es.service.signals import cancel_on_signal
from swa_es.service.status_file import write_status, write_status_every
from swa_es.service.views import StandardViews


def _share(text: str, where: str) -> float:
    """A share: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise SettingError(where, f"expected a number, got {text!r}") from None
    if not 0 < value <= 1:
        raise SettingError(where, f"must be in (0, 1], got {text!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowConfig:
    """``swa-es follow``: one long-running follower (each field an option or a group of them;
    ``egress`` is ``None`` without ``--zmq-publish``)."""

    log: LogAccess = nested(LogAccess)
    create_log: bool = option(
        "create-log",
        v.boolean,
        "create the FileLog directory when it is missing and wait for a writer (without it a "
        "missing directory, a typo, is an error)",
        default=False,
    )
    duration_s: float | None = field_of(RUN_DURATION)
    source_timeout_s: float = option(
        "source-timeout-s",
        v.positive_float,
        "answer a source unheard for S seconds (no batch, no heartbeat) as offline",
        default=15.0,
        metavar="S",
    )
    degraded_lag_records: int = option(
        "degraded-lag-records",
        v.positive_int,
        "answer sources as degraded while the follower is more than N records behind the log",
        default=10_000,
        metavar="N",
    )
    ready_lag_records: int = option(
        "ready-lag-records",
        v.non_negative_int,
        "/readyz: ready only within N records of the log's end",
        default=1000,
        metavar="N",
    )
    ready_lag_s: float | None = option(
        "ready-lag-s",
        v.positive_float,
        "/readyz: ready only within S seconds of the log's end (the lag's age)",
        default=None,
        metavar="S",
        shown_default="off",
    )
    ready_sources_share: float = option(
        "ready-sources-share",
        _share,
        "/readyz: ready once this share of the live sources (offline ones left out) is caught "
        "up (trusted, not unknown)",
        default=0.95,
        metavar="F",
    )
    metrics: MetricsEndpoint = nested(MetricsEndpoint)
    status_file: Path | None = field_of(STATUS_FILE)
    status_every_s: float = field_of(STATUS_EVERY)
    snapshots: str | None = field_of(SNAPSHOTS)
    snapshot_every_batches: int = option(
        "snapshot-every-batches",
        v.positive_int,
        "snapshot every N applied batches",
        default=1000,
        metavar="N",
    )
    snapshot_every_s: float = option(
        "snapshot-every-s",
        v.positive_float,
        "snapshot every S seconds if something was applied",
        default=30.0,
        metavar="S",
        old_flags=("snapshot-every",),
        old_variables=("snapshot-every",),
    )
    keep_snapshots: int = option(
        "keep-snapshots", v.positive_int, "snapshots kept", default=3, metavar="K"
    )
    max_record_bytes: int = option(
        "max-record-bytes",
        v.positive_int,
        "largest record decoded; a bigger one is counted as undecodable and skipped",
        default=DEFAULT_MAX_RECORD_BYTES,
        metavar="BYTES",
        shown_default="16 MiB",
    )
    http_host: str = option(
        "http-host",
        v.text_value,
        "address of the routing API (/v1/match, /v1/sources, /metrics, /healthz)",
        default="127.0.0.1",
        metavar="HOST",
    )
    http_port: int | None = option(
        "http-port",
        v.port,
        "port of the routing API; 0 picks a free one",
        default=None,
        metavar="PORT",
        shown_default="off",
    )
    http_max_request_bytes: int = option(
        "http-max-request-bytes",
        v.positive_int,
        "largest request body the routing API reads (413 beyond)",
        default=4 * 1024 * 1024,
        metavar="N",
    )
    http_access: HttpAccess = nested(HttpAccess)
    http_bounds: HttpBounds = nested(HttpBounds)
    token_free: bool = field_of(NO_TOKEN_IDS)
    egress: EgressConfig | None = nested(EgressConfig, optional=True)
    zmq_snapshot: str | None = option(
        "zmq-snapshot",
        v.zmq_endpoint,
        "ROUTER endpoint answering routers' snapshot requests (vLLM's proposed \"snapshot\") "
        "for the --zmq-publish stream: the follower's state with a cut on that stream's seq",
        default=None,
        metavar="ENDPOINT",
        shown_default="off",
    )
    zmq_security: ZmqServerSecurity = nested(ZmqServerSecurity)


COMMAND = Command("follow", FollowConfig)


def add_parser(subparsers: Any) -> None:
    """Add ``follow`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="long-running follower with snapshots and /metrics",
        description="Restore the newest snapshot, replay the tail, then apply live records; "
        "serve Prometheus /metrics, /healthz and /readyz.",
        run=run,
    )


def run(config: FollowConfig) -> int:
    """Run ``follow`` on the asyncio backend (uvloop when serving the routing API); the exit
    status."""
    options = fast_loop_options() if config.http_port is not None else {}
    return anyio.run(follow, config, backend="asyncio", backend_options=options)


class FollowerService:
    """A follower and what it reports."""

    def __init__(
        self,
        config: FollowConfig,
        follower: Follower,
        views: StandardViews,
        report: ServiceReport | None = None,
        tracker: ReplayTracker | None = None,
    ) -> None:
        self.config = config
        self.follower = follower
        self.views = views
        self.report = ServiceReport("follow") if report is None else report
        self.routing = FollowerRouting(
            follower, views, degraded_lag_records=config.degraded_lag_records
        )
        self.restored = False
        bounds = ReadyBounds(
            config.ready_lag_records, config.ready_lag_s, config.ready_sources_share
        )
        # tracker: what the follower reports its replays to (None: its replays go unseen)
        self.readiness = FollowerReadiness(
            follower, tracker or ReplayTracker(), bounds, lambda: self.restored
        )
        self.on_restored: list[Callable[[], None]] = []  # called once restored, before following
        self.more_families: list[Callable[[], list[Metric]]] = []  # the stream out's, if any
        self.metrics_port: int | None = None
        self.http_port: int | None = None

    def status(self) -> dict[str, Any]:
        """The status document: per-source digests, states and the follower's counters."""
        states = self.routing.source_states()
        replicas = {
            source: {
                "digest": self.views.replicas[source].state_digest(),
                "diverged": self.views.replicas[source].diverged,
                "state": states.get(source),
                **self.views.stats.get(source).as_dict(),
            }
            for source in self.views.replicas.sources()
        }
        return {
            "role": "follower",
            "pid": os.getpid(),
            "updated_at": time.time(),
            "restored": self.restored,
            "metrics_port": self.metrics_port,
            "http_port": self.http_port,
            "position": self.follower.position.offsets,
            "lost_history": {
                p: {"first": first, "end": end}
                for p, (first, end) in self.follower.lost_history.items()
            },
            "metrics": self.follower.metrics.as_dict(),
            "replicas": replicas,
        }

    def metric_families(self) -> list[Metric]:
        """What ``/metrics`` exports: the follower's families and each source's state."""
        live = self.routing.liveness()
        return [
            *follower_families(self.follower.metrics, self.views),
            *recovery_families(self.readiness.now()),
            *source_families(self.routing.source_states(), live.heard_s),
            *(each for more in self.more_families for each in more()),
        ]

    def health(self) -> tuple[bool, str]:
        """``/healthz``: healthy once restored (``/readyz``: once caught up too); diverged
        sources are named but not fatal."""
        if not self.restored:
            return False, "restoring"
        diverged = self.follower.diverged()
        return True, "ok" + (f"; diverged: {', '.join(sorted(diverged))}" if diverged else "")

    async def follow(self, started: Callable[[], None] = lambda: None) -> None:
        """Restore, then follow until the duration or a signal; snapshot on the way out
        (``started`` is called once the signals are caught)."""
        c = self.config
        async with anyio.create_task_group() as background:
            following = anyio.CancelScope(
                deadline=anyio.current_time() + (c.duration_s or math.inf)
            )
            await background.start(cancel_on_signal, following, self.report.stop)
            started()
            if c.status_file is not None:
                background.start_soon(
                    write_status_every, c.status_file, self.status, c.status_every_s
                )
            with following:
                began = anyio.current_time()
                info = await self.follower.restore()
                self.restored = True
                self.report.say(self._restored_line(info, anyio.current_time() - began))
                for hook in self.on_restored:
                    hook()
                background.start_soon(self._announce_readiness)
                await self.follower.run(follow=True)
            background.cancel_scope.cancel()
        if self.follower.store is not None and self.restored:
            await self.follower.snapshot()
        if c.status_file is not None:
            await write_status(c.status_file, self.status())

    async def _announce_readiness(self) -> None:
        """Say when ``/readyz`` turns 200 (the summary line ``ready: ...``), then each time it
        turns 503 or 200 again (looking every ``READY_CHECK_S``)."""
        said: bool | None = None  # the readiness last said (None: not ready yet)
        while True:
            readiness = self.readiness.now()
            changed = readiness.ready if said is None else readiness.ready != said
            if changed:
                self.report.say(self._readiness_line(readiness.reason, first=said is None))
                said = readiness.ready
            await anyio.sleep(READY_CHECK_S)

    def _readiness_line(self, reason: str, *, first: bool) -> str:
        if not reason.startswith("ready: "):
            return f"not ready: {reason}"
        detail = reason.removeprefix("ready: ")
        if not first:
            return f"ready again: {detail}"
        m = self.follower.metrics
        return (
            f"ready: following the log from position {_position(self.follower)}; {detail}; "
            f"{m.records_read} records read in {self.report.elapsed_s():.1f} s"
        )

    def _restored_line(self, info: SnapshotInfo | None, took_s: float) -> str:
        replayed = f"replayed {self.follower.metrics.records_read} records in {took_s:.1f} s"
        if info is None:
            where = "no snapshot" if self.follower.store is not None else "no --snapshots"
            return f"restored ({where}: the whole log), {replayed}"
        return (
            f"restored snapshot {info.where} at position {_position_text(info.position.offsets)}"
            f", {replayed}"
        )

    def counts(self) -> str:
        """The counts of the exit summary."""
        m = self.follower.metrics
        sources = self.views.replicas.sources()
        diverged = len(self.follower.diverged())
        return (
            f"{m.records_read} records read, {m.batches_applied} batches applied, "
            f"{len(sources)} source{'' if len(sources) == 1 else 's'} ({diverged} diverged), "
            f"{m.undecodable} undecodable, "
            f"{m.snapshots_written} snapshots written, position {_position(self.follower)}"
        )


READY_CHECK_S = 0.1
"""How often ``follow`` looks whether its readiness changed, to say so on stderr."""


def _position_text(offsets: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(offsets.items())) or "0"


def _position(follower: Follower) -> str:
    return _position_text(follower.position.offsets)


def follower_views(config: FollowConfig) -> StandardViews:
    """The views ``follow`` builds: the replicas keep token ids only for the stream out
    (``--zmq-publish``), the one reader of them."""
    return StandardViews.create(keep_tokens=config.egress is not None)


async def follow(config: FollowConfig) -> int:
    """Restore, follow until the duration or a signal, snapshot, report; the exit status."""
    report = ServiceReport("follow")
    check_status_file(config.status_file)
    check_snapshot_directory(config.snapshots)
    with report.failing():
        await _follow(config, report)
    return report.stopped(limit_reason="--duration-s reached")


async def _follow(config: FollowConfig, report: ServiceReport) -> None:
    """``follow``'s run, telling ``report`` what it does."""
    if config.zmq_snapshot is not None and config.egress is None:
        raise SettingError("--zmq-snapshot", "answers for the stream out: give --zmq-publish too")
    if config.token_free and config.egress is not None:
        raise SettingError(
            "--zmq-publish",
            "the stream out sends every block's token ids (users' prompts), and this deployment "
            "is token-free (--no-token-ids): its writers withhold them, and nothing may send "
            "them; serve routers with the routing API (/v1/match) instead",
        )
    if config.egress is not None:
        for flag in insecure_binds(_zmq_endpoints(config), config.zmq_security):
            report.say(
                f"warning: {flag} binds beyond this host without CURVE (--zmq-insecure): "
                "whoever connects reads the token ids"
            )
    security = config.http_access.security()  # a token or TLS file at fault fails first
    for host, port, flag in (
        (config.metrics.host, config.metrics.port, "--metrics-host"),
        (config.http_host, config.http_port, "--http-host"),
    ):
        if port is not None:
            security.exposure(host, flag)  # an unprotected public bind, before opening anything
    views = follower_views(config)
    async with AsyncExitStack() as stack:
        store = None
        if config.snapshots is not None:
            store = await open_snapshots(
                config.snapshots, config.log.open_timeout_s, keep=config.keep_snapshots
            )
            stack.push_async_callback(store.close)
        log = await open_reader(config.log.url, config.log.open_timeout_s, create=config.create_log)
        await stack.enter_async_context(log)
        tracker = ReplayTracker(terminal_progress(report.say))
        follower = Follower(
            log,
            views.all,
            snapshots=store,
            snapshot_every_batches=config.snapshot_every_batches,
            snapshot_every_s=config.snapshot_every_s,
            max_record_bytes=config.max_record_bytes,
            progress=tracker,
            source_timeout_s=config.source_timeout_s,
        )
        service = FollowerService(config, follower, views, report, tracker)
        report.counts = service.counts
        registry = registry_of(service.metric_families)
        metrics = await start_http_server(
            stack,
            AppParts(registry, service.health, readiness=service.readiness.check),
            host=config.metrics.host,
            port=config.metrics.port,
            security=security,
            limits=config.http_bounds.limits(),
        )
        service.metrics_port = None if metrics is None else metrics.port
        routing = await start_http_server(
            stack,
            AppParts(
                registry,
                service.health,
                routing=service.routing,
                max_request_bytes=config.http_max_request_bytes,
                readiness=service.readiness.check,
            ),
            host=config.http_host,
            port=config.http_port,
            host_flag="--http-host",
            port_flag="--http-port",
            security=security,
            limits=config.http_bounds.limits(),
        )
        service.http_port = None if routing is None else routing.port
        if config.egress is not None:
            stack.enter_context(_endpoint_flags(config))
            from swa_es.egress.bootstrap import follower_state, replica_lookup
            from swa_es.egress.curve import CurveServer
            from swa_es.egress.stream import ZmqEgress

            egress = ZmqEgress(
                log,
                config.egress,
                deferred=True,
                lookup=replica_lookup(views.replicas),
                applied=lambda: follower.position.get(0),
                curve=CurveServer.of(config.zmq_security),
            )
            service.more_families.append(lambda: _zmq_refusals(egress.refusal_counts()))
            # the run starts once restored: the follower's state, then the log from its position
            service.on_restored.append(
                lambda: egress.begin(follower_state(follower.position.get(0), views.replicas))
            )
            await stack.enter_async_context(egress)
            if config.zmq_snapshot is not None:
                from swa_es.egress.bootstrap import follower_capture
                from swa_es.egress.snapshot import SnapshotServer

                capture = follower_capture(
                    lambda: service.restored, lambda: follower.position.get(0), views.replicas
                )
                snapshots = SnapshotServer(egress, config.zmq_snapshot, capture)
                await stack.enter_async_context(snapshots)
        await service.follow(partial(report.started, _started(config, routing, metrics)))


def _zmq_refusals(counts: dict[tuple[str, str], int]) -> list[Metric]:
    """``swa_es_zmq_refusals_total`` of the stream out's refusal ``counts``."""
    refusals = family(metric_table.ZMQ_REFUSALS)
    for (socket, reason), value in sorted(counts.items()):
        refusals.add_metric([socket, reason], value)
    return [refusals]


def _zmq_endpoints(config: FollowConfig) -> dict[str, str | None]:
    """The ZMQ endpoints ``follow`` binds, by the flag that gives each."""
    egress = config.egress
    return {
        "--zmq-publish": None if egress is None else egress.publish_endpoint,
        "--zmq-replay": None if egress is None else egress.replay_endpoint,
        "--zmq-snapshot": config.zmq_snapshot,
    }


@contextmanager
def _endpoint_flags(config: FollowConfig) -> Iterator[None]:
    """An endpoint that cannot be bound, as an error naming the flag that gave it."""
    from swa_es.egress.stream import EndpointBindError

    flags = {config.zmq_snapshot: "--zmq-snapshot"}
    if config.egress is not None:
        flags[config.egress.replay_endpoint] = "--zmq-replay"
        flags[config.egress.publish_endpoint] = "--zmq-publish"
    try:
        yield
    except EndpointBindError as exc:
        flag = flags.get(exc.endpoint, "--zmq-*")
        raise ListenError(f"{flag} {exc.endpoint}", exc.reason, exc.endpoint) from exc


def _started(
    config: FollowConfig, routing: HttpServer | None, metrics: HttpServer | None
) -> list[str]:
    """What the start line says: what it reads and writes, and where it listens."""
    store = (
        "no --snapshots" if config.snapshots is None else f"snapshots in {redact(config.snapshots)}"
    )
    egress = config.egress
    return [
        f"following {redact(config.log.url)}",
        store,
        *listening("routing API", None if routing is None else routing.url),
        *listening("metrics", None if metrics is None else metrics.url),
        *[f"HTTP access: {s.security.describe()}" for s in (routing or metrics,) if s is not None],
        *listening("stream out", None if egress is None else egress.publish_endpoint),
        *listening("stream replay", None if egress is None else egress.replay_endpoint),
        *listening("snapshot requests", config.zmq_snapshot),
        *([] if config.status_file is None else [f"status file {config.status_file}"]),
    ]
