"""What ``serve`` and ``follow`` export at ``/metrics`` (Prometheus families)."""

from __future__ import annotations

from dataclasses import fields
from typing import Final

from consumers import FollowerMetrics
from swa_es.publish.metrics import PublisherMetrics
from swa_es.service.prometheus import Metric, counter, gauge
from swa_es.service.views import StandardViews

FOLLOWER_GAUGES: Final = frozenset(
    {"diverged_sources", "lag_records", "lag_s", "last_snapshot_at", "restored_generation"}
)
PUBLISHER_GAUGES: Final = frozenset({"queue_depth", "max_queue_batches"})
CHURN_FIELDS: Final = ("batches", "stored", "removed", "swa_evicted", "swa_restored", "cleared")


def follower_families(metrics: FollowerMetrics, views: StandardViews) -> list[Metric]:
    """The follower's counters and gauges, plus per-source replica sizes and digests."""
    families: list[Metric] = []
    for name, value in metrics.as_dict().items():
        if value is None or name == "snapshot_age_s":
            continue
        if name in FOLLOWER_GAUGES:
            families.append(gauge(f"swa_es_follower_{name}", f"follower {name}", value))
        else:
            families.append(counter(f"swa_es_follower_{name}_total", f"follower {name}", value))
    age = metrics.snapshot_age_s
    families.append(
        gauge(
            "swa_es_follower_snapshot_age_seconds",
            "seconds since the last snapshot was written or restored (-1: never)",
            -1.0 if age is None else age,
        )
    )
    families.extend(replica_families(views))
    return families


def replica_families(views: StandardViews) -> list[Metric]:
    """Per-source replica gauges and churn counters."""
    blocks = gauge("swa_es_replica_blocks", "blocks held by the replica of a source")
    tombstones = gauge("swa_es_replica_tombstones", "tombstoned blocks of a source's replica")
    diverged = gauge("swa_es_replica_diverged", "1 when a source's replica is diverged")
    digest = gauge("swa_es_replica_digest_info", "the replica's state digest, as a label")
    churn = {
        name: counter(f"swa_es_replica_{name}_total", f"{name} per source (churn)")
        for name in CHURN_FIELDS
    }
    for source in views.stats.sources():
        stats = views.stats.get(source)
        blocks.add(stats.blocks, source=source)
        tombstones.add(stats.tombstones, source=source)
        diverged.add(0 if stats.diverged is None else 1, source=source)
        tree = views.replicas.get(source)
        held = None if tree is None else tree.state_digest()
        if held is not None:
            digest.add(1, source=source, digest=held)
        for name in CHURN_FIELDS:
            churn[name].add(getattr(stats.churn, name), source=source)
    return [blocks, tombstones, diverged, digest, *churn.values()]


def publisher_families(
    metrics: PublisherMetrics, requests: int, cache_tokens: tuple[int, int], digest: str
) -> list[Metric]:
    """A primary's request count, publisher counters, cache size and digest."""
    source = metrics.source
    families = [
        counter("swa_es_primary_requests_total", "requests served").add(requests, source=source),
        gauge("swa_es_primary_cache_tokens", "tokens the tree holds per pool")
        .add(cache_tokens[0], source=source, pool="full")
        .add(cache_tokens[1], source=source, pool="swa"),
        gauge("swa_es_primary_digest_info", "the primary's state digest and epoch, as labels").add(
            1, source=source, digest=digest, epoch=metrics.epoch
        ),
        gauge("swa_es_publisher_failed", "1 once the append task died").add(
            int(metrics.failed), source=source
        ),
    ]
    for name, value in vars_of(metrics).items():
        if name in ("source", "epoch", "failed"):
            continue
        if name in PUBLISHER_GAUGES:
            families.append(
                gauge(f"swa_es_publisher_{name}", f"publisher {name}").add(value, source=source)
            )
        else:
            families.append(
                counter(f"swa_es_publisher_{name}_total", f"publisher {name}").add(
                    value, source=source
                )
            )
    return families


def vars_of(metrics: PublisherMetrics) -> dict[str, int]:
    """The numeric fields of a ``PublisherMetrics``."""
    return {
        f.name: int(getattr(metrics, f.name))
        for f in fields(metrics)
        if isinstance(getattr(metrics, f.name), int | bool)
    }
