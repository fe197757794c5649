"""What ``serve``, ``follow`` and ``bridge`` export at ``/metrics``, through prometheus_client.

Each service registers one ``FamiliesCollector`` in its own registry (``registry_of``): at
every scrape it reads the live counters (follower, replicas, sources, publisher, bridge) and
yields metric families; ``prometheus_client`` writes the exposition text. Every family is
built from its declaration in ``metric_table`` (name, type, unit, labels, help), and a live
counters object is read field by field through it: a field with no declaration is an error,
which the tests meet before a scrape does.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from consumers import FollowerMetrics
from consumers.readiness import Readiness
from swa_es.publish.metrics import PublisherMetrics
from swa_es.service import metric_table as table
from swa_es.service.http_metrics import ServiceRegistry
from swa_es.service.metric_table import MetricSpec
from swa_es.service.routing import STATES
from swa_es.service.views import StandardViews

_FOLLOWER: Final = table.by_field(table.FOLLOWER)
_PUBLISHER: Final = table.by_field(table.PUBLISHER)
_BRIDGE: Final = table.by_field(table.BRIDGE_COUNTERS)
_CHURN: Final = table.by_field(table.REPLICA_CHURN)
_SNAPSHOT_AGE: Final = table.by_name(table.FOLLOWER)["swa_es_follower_snapshot_age_seconds"]


class FamiliesCollector(Collector):
    """A collector whose families come from a function, called at each scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The families now."""
        yield from self._families()


def registry_of(families: Callable[[], Iterable[Metric]]) -> ServiceRegistry:
    """A service's registry: ``families``, the build info and the HTTP server's own metrics
    (no process or platform collectors)."""
    registry = ServiceRegistry()
    registry.register(FamiliesCollector(families))
    registry.register(FamiliesCollector(build_info_families))
    return registry


Family = CounterMetricFamily | GaugeMetricFamily


def family(spec: MetricSpec, value: float | None = None) -> Family:
    """An empty family of ``spec`` (labelled), or one holding ``value`` (unlabelled)."""
    labels = list(spec.labels) if value is None else None
    if spec.kind == "counter":
        return CounterMetricFamily(
            spec.family_name, spec.help, value=value, labels=labels, unit=spec.unit
        )
    if spec.kind == "gauge":
        return GaugeMetricFamily(
            spec.family_name, spec.help, value=value, labels=labels, unit=spec.unit
        )
    raise ValueError(f"{spec.name}: a {spec.kind} is not built from a value")


def _declared(specs: Mapping[str, MetricSpec], name: str, where: str) -> MetricSpec:
    spec = specs.get(name)
    if spec is None:
        raise KeyError(f"{where} field {name!r} has no metric declared in metric_table")
    return spec


def build_info_families() -> list[Metric]:
    """``swa_es_build_info{version}``: 1."""
    info = family(table.BUILD_INFO)
    info.add_metric([package_version()], 1)
    return [info]


def package_version() -> str:
    """The installed swa-es version ("unknown" when it runs uninstalled)."""
    try:
        return importlib.metadata.version("swa-es")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def follower_families(metrics: FollowerMetrics, views: StandardViews) -> list[Metric]:
    """The follower's counters and gauges, plus per-source replica sizes and churn."""
    families: list[Metric] = []
    for name, value in metrics.as_dict().items():
        if value is None or name == "snapshot_age_s" or name in table.FOLLOWER_UNEXPORTED:
            continue
        families.append(family(_declared(_FOLLOWER, name, "FollowerMetrics"), value))
    age = metrics.snapshot_age_s
    families.append(family(_SNAPSHOT_AGE, -1.0 if age is None else age))
    families.extend(replica_families(views))
    return families


def recovery_families(readiness: Readiness) -> list[Metric]:
    """``swa_es_follower_ready`` and the ``swa_es_recovery_*`` gauges of one judgement."""
    rate, eta = readiness.rate_records_s, readiness.eta_s
    return [
        family(table.FOLLOWER_READY, 1.0 if readiness.ready else 0.0),
        family(table.RECOVERY_REMAINING, readiness.to_go_records),
        family(table.RECOVERY_RATE, 0.0 if rate is None else rate),
        family(table.RECOVERY_ETA, -1.0 if eta is None else eta),
    ]


def replica_families(views: StandardViews) -> list[Metric]:
    """Per-source replica gauges and churn counters."""
    blocks = family(table.REPLICA_BLOCKS)
    tombstones = family(table.REPLICA_TOMBSTONES)
    diverged = family(table.REPLICA_DIVERGED)
    churn = {name: family(spec) for name, spec in _CHURN.items()}
    removed = family(table.REPLICA_REMOVED)
    for source in views.stats.sources():
        stats = views.stats.get(source)
        blocks.add_metric([source], stats.blocks)
        tombstones.add_metric([source], stats.tombstones)
        diverged.add_metric([source], 0 if stats.diverged is None else 1)
        for name, counter in churn.items():
            counter.add_metric([source], getattr(stats.churn, name))
        for medium, by_reason in sorted(stats.churn.removed_by.items()):
            for reason, count in sorted(by_reason.items()):
                removed.add_metric([source, medium, reason], count)
    return [blocks, tombstones, diverged, *churn.values(), removed]


def source_families(
    states: Mapping[str, str], heard_s: Callable[[str], float | None]
) -> list[Metric]:
    """Each source's state (``states``: source -> the state it is answered in) and the seconds
    since it was last heard (``heard_s``; None, never heard, exports 0)."""
    state = family(table.SOURCE_STATE)
    heard = family(table.SOURCE_LAST_HEARD)
    for source, current in states.items():
        for name in STATES:
            state.add_metric([source, name], 1.0 if name == current else 0.0)
        heard.add_metric([source], heard_s(source) or 0.0)
    return [state, heard]


def publisher_families(
    metrics: PublisherMetrics, requests: int, cache_tokens: tuple[int, int]
) -> list[Metric]:
    """A primary's request count and cache size, and its publisher's counters."""
    source = metrics.source
    served = family(table.PRIMARY_REQUESTS)
    served.add_metric([source], requests)
    tokens = family(table.PRIMARY_CACHE_TOKENS)
    tokens.add_metric([source, "full"], cache_tokens[0])
    tokens.add_metric([source, "swa"], cache_tokens[1])
    return [served, tokens, *publisher_counter_families(metrics)]


def publisher_counter_families(metrics: PublisherMetrics) -> list[Metric]:
    """A publisher's counters and gauges, labelled by source."""
    families: list[Metric] = []
    for name, value in vars_of(metrics).items():
        exported = family(_declared(_PUBLISHER, name, "PublisherMetrics"))
        exported.add_metric([metrics.source], value)
        families.append(exported)
    return families


def bridge_families(
    source: str,
    counters: Mapping[str, int],
    publisher: PublisherMetrics | None,
    tier_pages: Mapping[tuple[str, str], int] | None = None,
) -> list[Metric]:
    """A bridge's counters (``swa_es_bridge_*``: ``counters`` by field name), plus its current
    publisher's; ``tier_pages`` (the tier book's pages by (medium, outcome)) as
    ``swa_es_bridge_tier_pages_total``."""
    families: list[Metric] = []
    for name, value in counters.items():
        exported = family(_declared(_BRIDGE, name, "bridge counter"))
        exported.add_metric([source], value)
        families.append(exported)
    if tier_pages is not None:
        pages = family(table.BRIDGE_TIER_PAGES)
        for (medium, outcome), value in sorted(tier_pages.items()):
            pages.add_metric([source, medium, outcome], value)
        families.append(pages)
    if publisher is not None:
        families.extend(publisher_counter_families(publisher))
    return families


def vars_of(metrics: PublisherMetrics) -> dict[str, int]:
    """The numeric fields of a ``PublisherMetrics`` (``failed`` as 0 or 1)."""
    return {
        f.name: int(getattr(metrics, f.name))
        for f in fields(metrics)
        if f.name not in table.PUBLISHER_UNEXPORTED
    }
