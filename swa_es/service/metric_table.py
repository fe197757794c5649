"""Every metric ``serve``, ``follow`` and ``bridge`` export, declared once.

A ``MetricSpec`` gives a metric's name (as scraped: a counter's ends in ``_total``), type, unit,
labels, help sentence, the services exporting it, the live field it reads where it reads one, and
a suggested alert. The exporters build their families from it (``service_metrics`` for the
services' counters, ``http_metrics`` for what the HTTP server measures), docs/operations.md's
metric list is generated from it (``tools/metrics_table.py``; a test holds the two equal), and
the Prometheus rules and Grafana dashboard in ``deploy/`` may name only metrics declared here
(tests/test_metric_queries.py).

Names follow Prometheus conventions: ``swa_es_`` then the subsystem, a unit as the last word
before any ``_total`` (``_seconds``, ``_bytes``, ``_records``), counters ending in ``_total``, and
no label whose value changes as the service runs (a digest, a position) but for a bounded set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["counter", "gauge", "histogram"]
Service = Literal["follow", "serve", "bridge"]

FOLLOW: Final[tuple[Service, ...]] = ("follow",)
SERVE: Final[tuple[Service, ...]] = ("serve",)
BRIDGE_ONLY: Final[tuple[Service, ...]] = ("bridge",)
PUBLISHING: Final[tuple[Service, ...]] = ("serve", "bridge")
EVERY_SERVICE: Final[tuple[Service, ...]] = ("follow", "serve", "bridge")

UNITS: Final = frozenset({"seconds", "bytes", "records", "tokens", "blocks", "batches"})
"""The units a name may end in (before ``_total``)."""
_NAME: Final = re.compile(r"swa_es_[a-z][a-z0-9_]*[a-z0-9]")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric.

    ``name`` is as scraped (a counter's ends in ``_total``; a histogram's is the base of its
    ``_bucket``/``_sum``/``_count`` series). ``unit``: the name's unit suffix (``""``: a count
    or a state). ``field``: the attribute of a live counters object it exports (None: computed
    by its exporter). ``alert``: a suggested alert as a PromQL condition (``""``: none), held for
    ``alert_for`` (a Prometheus duration) before it fires.
    """

    name: str
    kind: Kind
    help: str
    services: tuple[Service, ...]
    labels: tuple[str, ...] = ()
    unit: str = ""
    field: str | None = None
    alert: str = ""
    alert_for: str = "5m"

    @property
    def family_name(self) -> str:
        """The name prometheus_client is given (it adds a counter's ``_total`` itself)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name

    @property
    def series_names(self) -> tuple[str, ...]:
        """Every sample name the metric is scraped as (a histogram's three)."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{part}" for part in ("bucket", "sum", "count"))
        return (self.name,)

    def problems(self) -> list[str]:
        """What breaks the naming conventions in this declaration (empty: nothing)."""
        found = []
        if not _NAME.fullmatch(self.name):
            found.append("name is not swa_es_ and lower-case words")
        if (self.kind == "counter") != self.name.endswith("_total"):
            found.append("a counter's name, and only a counter's, ends in _total")
        if self.unit and not self.name.removesuffix("_total").endswith("_" + self.unit):
            found.append(f"name does not end in its unit {self.unit!r}")
        if self.unit and self.unit not in UNITS:
            found.append(f"unit {self.unit!r} is not one of {sorted(UNITS)}")
        if not (
            (self.help[:1].isupper() or self.help[:1].isdigit())
            and self.help.endswith(".")
            and " " in self.help
        ):
            found.append("help is not a sentence (a capital, words, a full stop)")
        if self.kind == "histogram" and not self.unit:
            found.append("a histogram has a unit")
        return found


def _spec_of(kind: Kind) -> Callable[..., MetricSpec]:
    """A declarer of ``kind`` metrics, taking what ``MetricSpec`` takes but its kind."""

    def declare(
        name: str,
        text: str,
        services: tuple[Service, ...],
        field: str | None = None,
        *,
        labels: tuple[str, ...] = (),
        unit: str = "",
        alert: str = "",
        alert_for: str = "5m",
    ) -> MetricSpec:
        return MetricSpec(name, kind, text, services, labels, unit, field, alert, alert_for)

    return declare


_counter: Final = _spec_of("counter")
_gauge: Final = _spec_of("gauge")


_SRC: Final = ("source",)

FOLLOWER: Final = (
    _counter(
        "swa_es_follower_records_read_total",
        "Log records the follower read: batches, liveness records and undecodable ones.",
        FOLLOW,
        "records_read",
    ),
    _counter(
        "swa_es_follower_batches_applied_total",
        "Batches the follower applied to its views.",
        FOLLOW,
        "batches_applied",
    ),
    _counter(
        "swa_es_follower_events_applied_total",
        "Cache events in the batches the follower applied.",
        FOLLOW,
        "events_applied",
    ),
    _counter(
        "swa_es_follower_duplicates_skipped_total",
        "Batches skipped because the follower had already applied them (a redelivery).",
        FOLLOW,
        "duplicates_skipped",
    ),
    _counter(
        "swa_es_follower_stale_skipped_total",
        "Batches skipped because they belong to an epoch of their source that a newer one "
        "replaced.",
        FOLLOW,
        "stale_skipped",
    ),
    _counter(
        "swa_es_follower_skipped_while_diverged_total",
        "Batches skipped because their source is diverged (until its next epoch).",
        FOLLOW,
        "skipped_while_diverged",
    ),
    _counter(
        "swa_es_follower_undecodable_total",
        "Records that could not be decoded (or exceeded --max-record-bytes) and were skipped.",
        FOLLOW,
        "undecodable",
        alert="increase(swa_es_follower_undecodable_total[10m]) > 0",
        alert_for="0m",
    ),
    _counter(
        "swa_es_follower_heartbeats_read_total",
        "Heartbeats read from sources that had nothing else to publish.",
        FOLLOW,
        "heartbeats_read",
    ),
    _counter(
        "swa_es_follower_offline_markers_read_total",
        "Offline markers read: sources that said they stopped.",
        FOLLOW,
        "offline_markers_read",
    ),
    _counter(
        "swa_es_follower_liveness_stale_skipped_total",
        "Liveness records skipped as from another epoch or before the source's last batch.",
        FOLLOW,
        "liveness_stale_skipped",
    ),
    _counter(
        "swa_es_follower_gaps_total",
        "Sequence gaps in a source's stream; each makes the source diverged until its next epoch.",
        FOLLOW,
        "gaps",
    ),
    _counter(
        "swa_es_follower_bad_epoch_starts_total",
        "Epochs that did not begin with a clear at seq 0; each makes the source diverged.",
        FOLLOW,
        "bad_epoch_starts",
    ),
    _counter(
        "swa_es_follower_inconsistent_batches_total",
        "Batches that did not fit the replica they were applied to (an unknown block, say).",
        FOLLOW,
        "inconsistent_batches",
    ),
    _counter(
        "swa_es_follower_digests_checked_total",
        "In-band state digests the follower compared with its replica's.",
        FOLLOW,
        "digests_checked",
    ),
    _counter(
        "swa_es_follower_digest_mismatches_total",
        "In-band state digests that differed from the replica's; each diverges the source.",
        FOLLOW,
        "digest_mismatches",
        alert="increase(swa_es_follower_digest_mismatches_total[10m]) > 0",
        alert_for="0m",
    ),
    _counter(
        "swa_es_follower_digests_unverifiable_total",
        "In-band digests the follower could not check (a source whose digest it cannot compute).",
        FOLLOW,
        "digests_unverifiable",
    ),
    _counter(
        "swa_es_follower_divergences_total",
        "Times a source became diverged (its state unknown until its next epoch).",
        FOLLOW,
        "divergences",
    ),
    _gauge(
        "swa_es_follower_diverged_sources",
        "Sources diverged now: their answers are unknown until their next epoch.",
        FOLLOW,
        "diverged_sources",
        alert="swa_es_follower_diverged_sources > 0",
        alert_for="10m",
    ),
    _gauge(
        "swa_es_follower_lag_records",
        "Records the log holds past the follower's position (0 when caught up), as of the "
        "last look at the log's end (about every second).",
        FOLLOW,
        "lag_records",
        unit="records",
    ),
    _gauge(
        "swa_es_follower_lag_seconds",
        "How long the log has held records the follower has not applied: the age, on the "
        "follower's clock, of the oldest such record (0 when caught up; to within a second).",
        FOLLOW,
        "lag_s",
        unit="seconds",
        alert="swa_es_follower_lag_seconds > 30",
    ),
    _counter(
        "swa_es_follower_snapshots_written_total",
        "Snapshots the follower wrote.",
        FOLLOW,
        "snapshots_written",
    ),
    _counter(
        "swa_es_follower_snapshot_failures_total",
        "Snapshots the follower failed to write (or whose log pin it could not move); a "
        "scheduled one that fails is retried when due again.",
        FOLLOW,
        "snapshot_failures",
        alert="increase(swa_es_follower_snapshot_failures_total[15m]) > 0",
        alert_for="0m",
    ),
    _gauge(
        "swa_es_follower_snapshot_age_seconds",
        "Seconds since the follower last wrote or restored a snapshot (-1: never).",
        FOLLOW,
        unit="seconds",
    ),
    _gauge(
        "swa_es_follower_restored_generation",
        "Generation of the snapshot the follower restored (absent: it replayed the whole log).",
        FOLLOW,
        "restored_generation",
    ),
)
"""The follower's own counters and gauges (``consumers.FollowerMetrics``)."""

FOLLOWER_UNEXPORTED: Final = frozenset({"last_snapshot_at"})
"""``FollowerMetrics`` fields exported only through another metric (the snapshot's age)."""

SOURCE_STATE: Final = _gauge(
    "swa_es_source_state",
    "1 for the state each source is answered in (exact, degraded, offline, unknown), 0 for "
    "the others.",
    FOLLOW,
    labels=("source", "state"),
    alert='swa_es_source_state{state="offline"} == 1',
    alert_for="2m",
)
SOURCE_LAST_HEARD: Final = _gauge(
    "swa_es_source_last_heard_seconds",
    "Seconds since the follower last heard from a source (a batch or a heartbeat).",
    FOLLOW,
    labels=_SRC,
    unit="seconds",
)
SOURCES: Final = (SOURCE_STATE, SOURCE_LAST_HEARD)
"""Each source's state as the routing API answers it."""

FOLLOWER_READY: Final = _gauge(
    "swa_es_follower_ready",
    "1 while the follower is ready (/readyz answers 200: restored, within --ready-lag-records "
    "of the log's end, --ready-sources-share of its live sources trusted), else 0.",
    FOLLOW,
)
RECOVERY_REMAINING: Final = _gauge(
    "swa_es_recovery_remaining_records",
    "Records the follower has still to apply to be caught up: the rest of its replay while "
    "restoring, then its lag behind the log's end.",
    FOLLOW,
    unit="records",
)
RECOVERY_RATE: Final = _gauge(
    "swa_es_recovery_records_per_second",
    "Records per second the follower's current or last replay read (0 before any).",
    FOLLOW,
)
RECOVERY_ETA: Final = _gauge(
    "swa_es_recovery_eta_seconds",
    "Seconds left to catch up at the replay's rate (0 when caught up, -1 while unknown).",
    FOLLOW,
    unit="seconds",
)
RECOVERY: Final = (FOLLOWER_READY, RECOVERY_REMAINING, RECOVERY_RATE, RECOVERY_ETA)
"""How far a follower's recovery has come (``consumers.readiness.Readiness``)."""

REPLICA_BLOCKS: Final = _gauge(
    "swa_es_replica_blocks",
    "Blocks the follower's replica of a source holds on the GPU.",
    FOLLOW,
    labels=_SRC,
    unit="blocks",
)
REPLICA_TOMBSTONES: Final = _gauge(
    "swa_es_replica_tombstones",
    "Blocks of a source's replica whose sliding-window part was evicted (SWA tombstones).",
    FOLLOW,
    labels=_SRC,
)
REPLICA_DIVERGED: Final = _gauge(
    "swa_es_replica_diverged",
    "1 while a source's replica is diverged (its state unknown), else 0.",
    FOLLOW,
    labels=_SRC,
)
REPLICA_REMOVED: Final = MetricSpec(
    "swa_es_replica_removed_total",
    "counter",
    "Blocks removed from a source's replica, by tier (medium) and reason (evicted, demoted, "
    "unsaid).",
    FOLLOW,
    labels=("source", "medium", "reason"),
    field="removed_by",
)
REPLICA_CHURN: Final = tuple(
    _counter(f"swa_es_replica_{field}_total", text, FOLLOW, field, labels=_SRC)
    for field, text in (
        ("batches", "Batches applied to a source's replica."),
        ("stored", "Blocks stored in a source's replica."),
        ("swa_evicted", "Blocks whose sliding-window part a source evicted."),
        ("swa_restored", "Blocks whose sliding-window part a source restored."),
        ("cleared", "Times a source cleared all its blocks (an epoch start or a reset)."),
    )
)
"""Per-source churn (``consumers.views.stats.Churn``; ``removed`` is ``REPLICA_REMOVED``)."""
REPLICAS: Final = (REPLICA_BLOCKS, REPLICA_TOMBSTONES, REPLICA_DIVERGED, *REPLICA_CHURN)
REPLICAS_ALL: Final = (*REPLICAS, REPLICA_REMOVED)

PRIMARY_REQUESTS: Final = _counter(
    "swa_es_primary_requests_total",
    "Requests the primary's engine served.",
    SERVE,
    labels=_SRC,
)
PRIMARY_CACHE_TOKENS: Final = _gauge(
    "swa_es_primary_cache_tokens",
    "Tokens the primary's tree holds, per pool (full, swa).",
    SERVE,
    labels=("source", "pool"),
    unit="tokens",
)
PRIMARY: Final = (PRIMARY_REQUESTS, PRIMARY_CACHE_TOKENS)


def _publisher(
    field: str,
    kind: Kind,
    text: str,
    *,
    name: str = "",
    unit: str = "",
    alert: str = "",
    alert_for: str = "5m",
) -> MetricSpec:
    name = name or f"swa_es_publisher_{field}" + ("_total" if kind == "counter" else "")
    return MetricSpec(name, kind, text, PUBLISHING, _SRC, unit, field, alert, alert_for)


PUBLISHER: Final = (
    _publisher("epochs_started", "counter", "Epochs the publisher opened (a start or a resync)."),
    _publisher(
        "batches_queued", "counter", "Batches the publisher built, epoch openings included."
    ),
    _publisher("batches_published", "counter", "Batches the log acknowledged as durable."),
    _publisher("events_published", "counter", "Cache events in the batches published."),
    _publisher(
        "bytes_published",
        "counter",
        "Bytes of the batches published.",
        name="swa_es_publisher_published_bytes_total",
        unit="bytes",
    ),
    _publisher("appends", "counter", "Append calls the publisher made to the log."),
    _publisher("overflows", "counter", "Times the publisher's queue was full."),
    _publisher(
        "discarded_batches",
        "counter",
        "Batches dropped by a resync (superseded by the new epoch).",
    ),
    _publisher("discarded_events", "counter", "Cache events in the batches a resync dropped."),
    _publisher(
        "resyncs",
        "counter",
        "Epochs opened because the queue overflowed: the log is slower than the engine.",
        alert="increase(swa_es_publisher_resyncs_total[10m]) > 0",
        alert_for="0m",
    ),
    _publisher(
        "backpressure", "counter", "Times the publisher made the engine wait (Backpressure)."
    ),
    _publisher("append_errors", "counter", "Appends the log refused."),
    _publisher("append_retries", "counter", "Appends retried after a retriable log error."),
    _publisher("queue_depth", "gauge", "Batches queued and not yet handed to the log."),
    _publisher(
        "max_queue_batches",
        "gauge",
        "Batches the publisher's queue holds at most.",
        unit="batches",
    ),
    _publisher("heartbeats", "counter", "Heartbeats the publisher appended while idle."),
    _publisher("offline_markers", "counter", "Offline markers the publisher appended."),
    _publisher("liveness_errors", "counter", "Heartbeats the log refused (logged, not fatal)."),
    _publisher(
        "failed",
        "gauge",
        "1 once the publisher's append task died (nothing more reaches the log), else 0.",
        alert="swa_es_publisher_failed == 1",
        alert_for="0m",
    ),
)
"""A publisher's counters and gauges (``swa_es.publish.PublisherMetrics``)."""

PUBLISHER_UNEXPORTED: Final = frozenset({"source", "epoch"})
"""``PublisherMetrics`` fields that are labels or change too often to be one."""


def _bridge(
    field: str, text: str, kind: Kind = "counter", *, alert: str = "", alert_for: str = "5m"
) -> MetricSpec:
    name = f"swa_es_bridge_{field}" + ("_total" if kind == "counter" else "")
    return MetricSpec(name, kind, text, BRIDGE_ONLY, _SRC, "", field, alert, alert_for)


BRIDGE_COUNTERS: Final = (
    _bridge("received", "Messages the bridge received live from its engine."),
    _bridge("replayed", "Batches the engine's replay socket sent the bridge."),
    _bridge("gaps", "Sequence gaps in the engine's stream (live or in a replay)."),
    _bridge(
        "unfilled_gaps",
        "Gaps the replay could not fill (passed on to followers, which diverge the source).",
        alert="increase(swa_es_bridge_unfilled_gaps_total[10m]) > 0",
        alert_for="0m",
    ),
    _bridge("epochs", "Epochs the bridge opened in the log."),
    _bridge("restarts", "Engine restarts the bridge saw."),
    _bridge("undecodable", "Engine messages or batches that could not be read."),
    _bridge("unknown_events", "Engine events of types the bridge does not know (skipped)."),
    _bridge("duplicates", "Live messages a replay had already delivered."),
    _bridge("batches_applied", "Engine batches the bridge turned into its own batches."),
    _bridge("replay_requests", "Replays the bridge asked of the engine."),
    _bridge("replay_timeouts", "Replays the engine did not answer in time."),
    _bridge("disconnects", "Live connections to the engine that dropped."),
    _bridge(
        "engine_offline",
        "Times the engine went unheard past --engine-timeout-s (each marked offline in the log).",
    ),
    _bridge(
        "unknown",
        "1 while the source's state is unknown (a gap not filled, until the next epoch), else 0.",
        kind="gauge",
    ),
    _bridge("unplaced_tier_blocks", "Tier stores the bridge could not place."),
    _bridge("unplaced_tier_removals", "Tier removals of blocks not held on that tier."),
    _bridge("repeated_tier_stores", "Tier stores of a block already held on that tier."),
    _bridge("tier_other_group", "Tier events of sliding-window and other groups."),
    _bridge("unknown_medium_events", "Events naming a medium the bridge does not rank."),
)
"""A bridge's counters (``swa_es.bridge.BridgeMetrics`` and its tier book's ``TierCounters``)."""

BRIDGE_TIER_PAGES: Final = MetricSpec(
    "swa_es_bridge_tier_pages_total",
    "counter",
    "Pages the bridge's tier book handled, by medium and outcome (stored, repeated, "
    "unplaced, other_group, unplaced_removal, removed_evicted, removed_demoted).",
    BRIDGE_ONLY,
    labels=("source", "medium", "outcome"),
    field="pages",
)
BRIDGE: Final = (*BRIDGE_COUNTERS, BRIDGE_TIER_PAGES)

HTTP_REQUESTS: Final = MetricSpec(
    "swa_es_http_requests_total",
    "counter",
    "HTTP requests answered, by route (other: any path not served) and status code.",
    EVERY_SERVICE,
    labels=("route", "code"),
    alert='sum by (instance) (rate(swa_es_http_requests_total{code=~"5.."}[5m])) > 0',
)
HTTP_DURATION: Final = MetricSpec(
    "swa_es_http_request_duration_seconds",
    "histogram",
    "Seconds from a request's head read to its answer written, by route and outcome "
    "(the status class: 2xx, 4xx, 5xx).",
    EVERY_SERVICE,
    labels=("route", "outcome"),
    unit="seconds",
    alert="histogram_quantile(0.99, sum by (instance, le) (rate("
    'swa_es_http_request_duration_seconds_bucket{route="/v1/match"}[5m]))) > 0.05',
)
HTTP_REFUSALS: Final = MetricSpec(
    "swa_es_http_refusals_total",
    "counter",
    "Requests refused, by reason: bad_body, too_large, unsupported_type, restoring, "
    "wrong_method, head_too_large, bad_version, slow_head, slow_body, "
    "too_many_connections, unauthenticated (no bearer token), forbidden (an unknown one).",
    EVERY_SERVICE,
    labels=("reason",),
)
HTTP: Final = (HTTP_REQUESTS, HTTP_DURATION, HTTP_REFUSALS)
"""What each service's HTTP server measures of itself (``http_metrics``)."""
ZMQ_REFUSALS: Final = MetricSpec(
    "swa_es_zmq_refusals_total",
    "counter",
    "Requests and connections the follower's ZMQ sockets refused, by socket and reason: "
    "replay too_far (beyond --zmq-replay-max-records) or rate (beyond "
    "--zmq-client-requests-per-s), snapshot rate or busy (beyond --zmq-snapshot-max-pending), "
    "curve unlisted_key (a CURVE client key not in --zmq-curve-clients).",
    FOLLOW,
    labels=("socket", "reason"),
)
HTTP_DURATION_BUCKETS_S: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)
"""The duration histogram's bounds: the routing API answers in a fraction of a millisecond."""

FEEDBACK_REPORTS: Final = _counter(
    "swa_es_feedback_reports_total",
    "Routed requests reported to /v1/feedback, by the source they were sent to.",
    FOLLOW,
    labels=_SRC,
)
FEEDBACK_UNPREDICTED: Final = _counter(
    "swa_es_feedback_unpredicted_total",
    "Reports whose chosen source had no known prediction (offline, unknown or another page "
    "size): left out of the error histogram and the predicted tokens.",
    FOLLOW,
    labels=_SRC,
)
FEEDBACK_INCORRECT: Final = _counter(
    "swa_es_feedback_incorrect_routes_total",
    "Reports where the engine reused fewer tokens on the chosen source than the index "
    "predicted another source could reuse (a request routed wrongly, as far as the index "
    "knew).",
    FOLLOW,
    labels=_SRC,
)
FEEDBACK_TOKEN_SUMS: Final = tuple(
    _counter(f"swa_es_feedback_{what}_tokens_total", text, FOLLOW, labels=_SRC, unit="tokens")
    for what, text in (
        ("prompt", "Prompt tokens of the reported requests (the denominator of hit rates)."),
        (
            "predicted",
            "Tokens the index predicted the chosen source would reuse (usable tokens where "
            "known, else cached), summed over the reports it predicted.",
        ),
        ("reused", "Prompt tokens the engines reported they actually reused, summed."),
    )
)
"""Block-weighted sums (every block counts its page's tokens): rates are ratios of sums."""
FEEDBACK_ERROR: Final = MetricSpec(
    "swa_es_feedback_prediction_error_tokens",
    "histogram",
    "Predicted minus actually reused tokens on the chosen source, per report (negative: "
    "the engine reused more than the index knew of).",
    FOLLOW,
    labels=_SRC,
    unit="tokens",
)
_ERROR_BOUNDS_TOKENS: Final = (64, 256, 1024, 4096)
FEEDBACK_ERROR_BUCKETS_TOKENS: Final = (
    *(-bound for bound in reversed(_ERROR_BOUNDS_TOKENS)),
    -16,
    -1,
    0,
    15,
    *(bound - 1 for bound in _ERROR_BOUNDS_TOKENS),
)
"""The error histogram's bounds: ``le=0`` above ``le=-1`` counts the exact predictions."""
FEEDBACK: Final = (
    FEEDBACK_REPORTS,
    FEEDBACK_UNPREDICTED,
    FEEDBACK_INCORRECT,
    *FEEDBACK_TOKEN_SUMS,
    FEEDBACK_ERROR,
)
"""Prediction quality, from routers' reports (``feedback``)."""

BUILD_INFO: Final = _gauge(
    "swa_es_build_info",
    "Always 1: the version of swa-es serving, as a label.",
    EVERY_SERVICE,
    labels=("version",),
)

METRICS: Final = (
    *FOLLOWER,
    *RECOVERY,
    *SOURCES,
    *REPLICAS_ALL,
    *PRIMARY,
    *PUBLISHER,
    *BRIDGE,
    *HTTP,
    ZMQ_REFUSALS,
    *FEEDBACK,
    BUILD_INFO,
)
"""Every metric, in the order docs/operations.md lists them."""


def by_field(specs: Iterable[MetricSpec]) -> dict[str, MetricSpec]:
    """``specs`` that read a field, by that field."""
    return {spec.field: spec for spec in specs if spec.field is not None}


def by_name(specs: Iterable[MetricSpec] = METRICS) -> Mapping[str, MetricSpec]:
    """``specs`` by name."""
    return {spec.name: spec for spec in specs}


def table_problems(specs: Iterable[MetricSpec] = METRICS) -> list[str]:
    """Every convention a declaration breaks, and every name declared twice."""
    found = []
    seen: set[str] = set()
    for spec in specs:
        found += [f"{spec.name}: {problem}" for problem in spec.problems()]
        if spec.name in seen:
            found.append(f"{spec.name}: declared twice")
        seen.add(spec.name)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(specs: Iterable[MetricSpec] = METRICS) -> str:
    """The metric list of docs/operations.md: one row per metric."""
    rows = [
        "| metric | type | labels | exported by | meaning | suggested alert |",
        "|---|---|---|---|---|---|",
    ]
    for spec in specs:
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "none"
        alert = ""
        if spec.alert:
            held = "" if spec.alert_for == "0m" else f" for {spec.alert_for}"
            alert = f"`{_cell(spec.alert)}`{held}"
        rows.append(
            f"| `{spec.name}` | {spec.kind} | {labels} | {', '.join(spec.services)} "
            f"| {_cell(spec.help)} | {alert} |"
        )
    return "\n".join(rows) + "\n"
