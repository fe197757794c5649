"""What ``serve``, ``follow`` and ``bridge`` export at ``/metrics``, through prometheus_client.

Each service registers one ``FamiliesCollector`` in its own ``CollectorRegistry``: at every
scrape it reads the live counters (follower, replicas, publisher, bridge) and yields metric
families; ``prometheus_client`` writes the exposition text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from consumers import FollowerMetrics
from consumers.views.stats import CHURN_COUNTS
from swa_es.publish.metrics import PublisherMetrics
from swa_es.service.views import StandardViews

FOLLOWER_GAUGES: Final = frozenset(
    {"diverged_sources", "lag_records", "lag_s", "last_snapshot_at", "restored_generation"}
)
PUBLISHER_GAUGES: Final = frozenset({"queue_depth", "max_queue_batches"})
BRIDGE_GAUGES: Final = frozenset({"unknown"})


class FamiliesCollector(Collector):
    """A collector whose families come from a function, called at each scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The families now."""
        yield from self._families()


def registry_of(families: Callable[[], Iterable[Metric]]) -> CollectorRegistry:
    """A registry holding only ``families`` (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(families))
    return registry


def _counter(name: str, doc: str, value: float | None = None) -> CounterMetricFamily:
    # prometheus_client adds the ``_total`` suffix itself; names here keep it for grep-ability.
    return CounterMetricFamily(name.removesuffix("_total"), doc, value=value)


def _labelled_counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)


def _scalar_families(
    prefix: str, values: Mapping[str, float | int | None], gauges: frozenset[str]
) -> list[Metric]:
    families: list[Metric] = []
    for name, value in values.items():
        if value is None:
            continue
        if name in gauges:
            families.append(GaugeMetricFamily(f"{prefix}_{name}", f"{name}", value=value))
        else:
            families.append(_counter(f"{prefix}_{name}_total", f"{name}", value))
    return families


def follower_families(metrics: FollowerMetrics, views: StandardViews) -> list[Metric]:
    """The follower's counters and gauges, plus per-source replica sizes and digests."""
    values = {k: v for k, v in metrics.as_dict().items() if k != "snapshot_age_s"}
    families = _scalar_families("swa_es_follower", values, FOLLOWER_GAUGES)
    age = metrics.snapshot_age_s
    families.append(
        GaugeMetricFamily(
            "swa_es_follower_snapshot_age_seconds",
            "seconds since the last snapshot was written or restored (-1: never)",
            value=-1.0 if age is None else age,
        )
    )
    families.extend(replica_families(views))
    return families


def replica_families(views: StandardViews) -> list[Metric]:
    """Per-source replica gauges and churn counters."""
    blocks = GaugeMetricFamily(
        "swa_es_replica_blocks", "blocks held by the replica of a source", labels=["source"]
    )
    tombstones = GaugeMetricFamily(
        "swa_es_replica_tombstones", "tombstoned blocks of a source's replica", labels=["source"]
    )
    diverged = GaugeMetricFamily(
        "swa_es_replica_diverged", "1 when a source's replica is diverged", labels=["source"]
    )
    digest = GaugeMetricFamily(
        "swa_es_replica_digest_info",
        "the replica's state digest, as a label",
        labels=["source", "digest"],
    )
    churn = {
        name: _labelled_counter(
            f"swa_es_replica_{name}_total", f"{name} per source (churn)", ["source"]
        )
        for name in CHURN_COUNTS
    }
    removed_by = _labelled_counter(
        "swa_es_replica_removed_by_total",
        "blocks removed per source, by tier (medium) and reason (evicted, demoted, unsaid)",
        ["source", "medium", "reason"],
    )
    for source in views.stats.sources():
        stats = views.stats.get(source)
        blocks.add_metric([source], stats.blocks)
        tombstones.add_metric([source], stats.tombstones)
        diverged.add_metric([source], 0 if stats.diverged is None else 1)
        tree = views.replicas.get(source)
        held = None if tree is None else tree.state_digest()
        if held is not None:
            digest.add_metric([source, held], 1)
        for name in CHURN_COUNTS:
            churn[name].add_metric([source], getattr(stats.churn, name))
        for medium, by_reason in sorted(stats.churn.removed_by.items()):
            for reason, count in sorted(by_reason.items()):
                removed_by.add_metric([source, medium, reason], count)
    return [blocks, tombstones, diverged, digest, *churn.values(), removed_by]


def publisher_families(
    metrics: PublisherMetrics, requests: int, cache_tokens: tuple[int, int], digest: str
) -> list[Metric]:
    """A primary's request count, publisher counters, cache size and digest."""
    source = metrics.source
    served = _labelled_counter("swa_es_primary_requests_total", "requests served", ["source"])
    served.add_metric([source], requests)
    tokens = GaugeMetricFamily(
        "swa_es_primary_cache_tokens", "tokens the tree holds per pool", labels=["source", "pool"]
    )
    tokens.add_metric([source, "full"], cache_tokens[0])
    tokens.add_metric([source, "swa"], cache_tokens[1])
    info = GaugeMetricFamily(
        "swa_es_primary_digest_info",
        "the primary's state digest and epoch, as labels",
        labels=["source", "digest", "epoch"],
    )
    info.add_metric([source, digest, metrics.epoch], 1)
    families: list[Metric] = [served, tokens, info]
    families.extend(publisher_counter_families(metrics))
    return families


def publisher_counter_families(metrics: PublisherMetrics) -> list[Metric]:
    """A publisher's counters and gauges, labelled by source."""
    source = metrics.source
    failed = GaugeMetricFamily(
        "swa_es_publisher_failed", "1 once the append task died", labels=["source"]
    )
    failed.add_metric([source], int(metrics.failed))
    families: list[Metric] = [failed]
    for name, value in vars_of(metrics).items():
        if name in ("source", "epoch", "failed"):
            continue
        family: Metric
        if name in PUBLISHER_GAUGES:
            family = GaugeMetricFamily(
                f"swa_es_publisher_{name}", f"publisher {name}", labels=["source"]
            )
        else:
            family = _labelled_counter(
                f"swa_es_publisher_{name}_total", f"publisher {name}", ["source"]
            )
        family.add_metric([source], value)
        families.append(family)
    return families


def bridge_families(
    source: str,
    counters: Mapping[str, int],
    publisher: PublisherMetrics | None,
    tier_pages: Mapping[tuple[str, str], int] | None = None,
) -> list[Metric]:
    """A bridge's counters (``swa_es_bridge_*``), plus its current publisher's; ``tier_pages``
    (the tier book's pages by (medium, outcome)) as ``swa_es_bridge_tier_pages_total``."""
    families: list[Metric] = []
    for name, value in counters.items():
        family: Metric
        if name in BRIDGE_GAUGES:
            family = GaugeMetricFamily(f"swa_es_bridge_{name}", f"bridge {name}", labels=["source"])
        else:
            family = _labelled_counter(f"swa_es_bridge_{name}_total", f"bridge {name}", ["source"])
        family.add_metric([source], value)
        families.append(family)
    if tier_pages is not None:
        pages = _labelled_counter(
            "swa_es_bridge_tier_pages_total",
            "bridge tier pages by medium and outcome",
            ["source", "medium", "outcome"],
        )
        for (medium, outcome), value in sorted(tier_pages.items()):
            pages.add_metric([source, medium, outcome], value)
        families.append(pages)
    if publisher is not None:
        families.extend(publisher_counter_families(publisher))
    return families


def vars_of(metrics: PublisherMetrics) -> dict[str, int]:
    """The numeric fields of a ``PublisherMetrics``."""
    return {
        f.name: int(getattr(metrics, f.name))
        for f in fields(metrics)
        if isinstance(getattr(metrics, f.name), int | bool)
    }
