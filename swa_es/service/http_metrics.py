"""What a service's HTTP server measures of itself (``metric_table.HTTP``): requests by route
and status code, their durations by route and outcome (the status class), refusals by reason.

The routing API answers ``POST /v1/match`` in a fraction of a millisecond, so recording one
answer costs a dict lookup, two increments, a bisection and an addition (plus an increment for a
refusal): each (route, status) gets its series on first use, plain numbers, since the server
records and is scraped on its event loop's thread alone. At a scrape ``families`` turns them
into metric families built from the table, like every other family.

A service's registry is a ``ServiceRegistry``, which holds its ``HttpMetrics``; the app and the
connection protocol record into that (``http_metrics_of``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from swa_es.service.feedback import FEEDBACK_ROUTE, QUALITY_ROUTE
from swa_es.service.metric_table import (
    HTTP_DURATION,
    HTTP_DURATION_BUCKETS_S,
    HTTP_REFUSALS,
    HTTP_REQUESTS,
)

MATCH_ROUTE: Final = "/v1/match"
ROUTES: Final = frozenset(
    {MATCH_ROUTE, "/v1/sources", "/metrics", "/healthz", "/readyz", FEEDBACK_ROUTE, QUALITY_ROUTE}
)
"""The routes labelled by their path; any other path is ``OTHER_ROUTE``."""
OTHER_ROUTE: Final = "other"
HEALTH_ROUTE: Final = "/healthz"
READY_ROUTE: Final = "/readyz"
PROBE_ROUTES: Final = frozenset({HEALTH_ROUTE, READY_ROUTE})
"""Routes whose 503 is their answer (not ready), never a refusal."""

REFUSAL_REASONS: Final = {
    400: "bad_body",
    401: "unauthenticated",
    403: "forbidden",
    405: "wrong_method",
    413: "too_large",
    415: "unsupported_type",
    431: "head_too_large",
    503: "restoring",
    505: "bad_version",
}
"""The refusal an answer's status means (``/healthz``'s 503 is its answer, not a refusal)."""
SLOW_HEAD: Final = "slow_head"
"""A request head not complete in time (the connection protocol's 408)."""
SLOW_BODY: Final = "slow_body"
"""A request body not complete in time after its head (the connection protocol's 408)."""
TOO_MANY_CONNECTIONS: Final = "too_many_connections"
"""A connection past the server's cap (the connection protocol's 503 as it opens)."""
CONNECTION_REFUSALS: Final = (SLOW_HEAD, SLOW_BODY, TOO_MANY_CONNECTIONS)
"""The refusals the connection protocol makes by itself, beyond ``REFUSAL_REASONS``."""
_BOUNDS_S: Final = HTTP_DURATION_BUCKETS_S
_LE: Final = [repr(float(bound)) for bound in _BOUNDS_S] + ["+Inf"]


def route_of(path: str) -> str:
    """The ``route`` label of a request for ``path``."""
    return path if path in ROUTES else OTHER_ROUTE


@dataclass(slots=True)
class _Count:
    value: int = 0


@dataclass(slots=True)
class _Durations:
    """One histogram series: counts per bucket (the last: past every bound) and their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(_BOUNDS_S) + 1))
    sum_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Series:
    """What one answer of a (route, status) adds to."""

    requests: _Count
    durations: _Durations
    refusal: _Count | None


class HttpMetrics:
    """The HTTP server's requests, durations and refusals, as families at each scrape."""

    def __init__(self) -> None:
        self._requests: dict[tuple[str, str], _Count] = {}
        self._durations: dict[tuple[str, str], _Durations] = {}
        self._refusals: dict[str, _Count] = {}
        self._series: dict[tuple[str, int], _Series] = {}

    def answered(self, route: str, status: int, seconds: float) -> None:
        """Count one answer of ``status`` on ``route`` (a ``route_of`` label) that took
        ``seconds``; a refusal's status counts its reason too."""
        series = self._series.get((route, status))
        if series is None:
            series = self._make_series(route, status)
        series.requests.value += 1
        durations = series.durations
        durations.counts[bisect_left(_BOUNDS_S, seconds)] += 1
        durations.sum_s += seconds
        if series.refusal is not None:
            series.refusal.value += 1

    def refused_early(self, status: int, reason: str) -> None:
        """Count a request the connection refused before it reached a route (a head too large
        or too slow, an HTTP version not served, a body too slow, a connection past the cap):
        its status under ``OTHER_ROUTE`` and its ``reason``."""
        self._requests.setdefault((OTHER_ROUTE, str(status)), _Count()).value += 1
        self._refusals.setdefault(reason, _Count()).value += 1

    def _make_series(self, route: str, status: int) -> _Series:
        reason = None if route in PROBE_ROUTES else REFUSAL_REASONS.get(status)
        series = _Series(
            self._requests.setdefault((route, str(status)), _Count()),
            self._durations.setdefault((route, f"{status // 100}xx"), _Durations()),
            None if reason is None else self._refusals.setdefault(reason, _Count()),
        )
        self._series[(route, status)] = series
        return series

    def families(self) -> list[Metric]:
        """The three families now (labelled series only once used)."""
        requests = CounterMetricFamily(
            HTTP_REQUESTS.family_name, HTTP_REQUESTS.help, labels=HTTP_REQUESTS.labels
        )
        for labels, answers in sorted(self._requests.items()):
            requests.add_metric(labels, answers.value)
        durations = HistogramMetricFamily(
            HTTP_DURATION.family_name,
            HTTP_DURATION.help,
            labels=HTTP_DURATION.labels,
            unit=HTTP_DURATION.unit,
        )
        for labels, series in sorted(self._durations.items()):
            cumulative, buckets = 0, []
            for le, in_bucket in zip(_LE, series.counts, strict=True):
                cumulative += in_bucket
                buckets.append((le, cumulative))
            durations.add_metric(labels, buckets, series.sum_s)
        refusals = CounterMetricFamily(
            HTTP_REFUSALS.family_name, HTTP_REFUSALS.help, labels=HTTP_REFUSALS.labels
        )
        for reason, refused in sorted(self._refusals.items()):
            refusals.add_metric([reason], refused.value)
        return [requests, durations, refusals]


class _HttpCollector(Collector):
    def __init__(self, metrics: HttpMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics.families()


class ServiceRegistry(CollectorRegistry):
    """A service's registry: its HTTP server's own metrics (``http``) are registered in it from
    the start."""

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self.http = HttpMetrics()
        self.register(_HttpCollector(self.http))


def http_metrics_of(registry: CollectorRegistry) -> HttpMetrics:
    """The HTTP metrics ``registry`` exports (a registry that is no ``ServiceRegistry``
    exports none: they are then recorded where no scrape reads them)."""
    if isinstance(registry, ServiceRegistry):
        return registry.http
    return HttpMetrics()
