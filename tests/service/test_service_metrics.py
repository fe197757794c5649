"""What the services export at ``/metrics``, scraped over real HTTP: every family is declared in
the metric table (its name, type and help), the declarations follow Prometheus conventions,
docs/operations.md lists them, every live counter has one, and the HTTP server counts its
requests, durations and refusals on the hot route and through ASGI alike."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import fields
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers import Follower, FollowerMetrics
from consumers.progress import ReplayTracker
from consumers.readiness import FollowerReadiness, ReadyBounds
from consumers.views.stats import CHURN_COUNTS
from log import MemoryLog
from swa_es.bridge.metrics import BridgeMetrics
from swa_es.bridge.tiers import TierCounters
from swa_es.publish.metrics import PublisherMetrics
from swa_es.service import metric_table as table
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_metrics import REFUSAL_REASONS
from swa_es.service.http_server import HttpServer
from swa_es.service.metric_table import METRICS, MetricSpec
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import (
    bridge_families,
    follower_families,
    publisher_families,
    recovery_families,
    registry_of,
    source_families,
)
from swa_es.service.views import StandardViews
from swa_es.testing.metrics import parse_samples, refusals_by_reason
from tests.consumers.primary_model import PrimaryModel, record

REPO = Path(__file__).resolve().parents[2]
DECLARED = {spec.name: spec for spec in METRICS}


def test_the_declarations_follow_the_conventions() -> None:
    """Units last, ``_total`` on counters only, sentences for help, each name once; a bad
    declaration is caught."""
    assert table.table_problems() == []
    assert all(reason in table.HTTP_REFUSALS.help for reason in REFUSAL_REASONS.values())
    bad = MetricSpec("swa_es_follower_lag_s", "counter", "lag_s", ("follow",), unit="seconds")
    assert len(bad.problems()) == 3


def test_every_live_counter_is_declared() -> None:
    """Each field of the counters objects the services export has a declaration (or is named
    as exported another way), so none goes unexported or undocumented."""
    follower = {f.name for f in fields(FollowerMetrics)} - table.FOLLOWER_UNEXPORTED
    assert follower == set(table.by_field(table.FOLLOWER))
    publisher = {f.name for f in fields(PublisherMetrics)} - table.PUBLISHER_UNEXPORTED
    assert publisher == set(table.by_field(table.PUBLISHER))
    bridge = set(BridgeMetrics().as_dict()) | set(TierCounters().as_dict())
    assert bridge == set(table.by_field(table.BRIDGE_COUNTERS))
    assert {*CHURN_COUNTS} - {"removed"} == set(table.by_field(table.REPLICA_CHURN))


def test_the_operations_guide_lists_the_table() -> None:
    """docs/operations.md's metric list is the one tools/metrics_table.py makes."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import metrics_table  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO / "tools"))
    text = (REPO / "docs" / "operations.md").read_text()
    assert metrics_table.updated(text) == text, (
        "docs/operations.md's metric list is stale: run `.venv/bin/python tools/metrics_table.py`"
    )


def assert_declared(text: str) -> set[str]:
    """Every family of a scrape is declared with the type, help and labels it was exported
    with (a digest, say, can be no label); the names scraped."""
    names = set()
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        spec = DECLARED.get(name)
        assert spec is not None, f"{name} is exported but not declared in metric_table"
        assert (family.type, family.documentation) == (spec.kind, spec.help), name
        for sample in family.samples:
            labels = set(sample.labels) - ({"le"} if sample.name.endswith("_bucket") else set())
            assert labels == set(spec.labels), (sample.name, sample.labels)
        names.add(name)
    return names


async def _followed() -> tuple[Follower, StandardViews]:
    log = MemoryLog()
    model = PrimaryModel("w0", page_size=4)
    batches = [model.start_epoch("e1"), model.batch(model.store(list(range(1, 33))))]
    batches.append(model.batch(model.remove(model.hashes(list(range(1, 33)))[-1:])))
    await log.append_batch([record(b) for b in batches])
    views = StandardViews.create()
    follower = Follower(log, views.all)
    await follower.catch_up()
    return follower, views


async def test_a_follower_scrape_is_all_declared_and_has_what_an_operator_alerts_on() -> None:
    """The follower's families over HTTP: each declared; the lag in records and seconds, the
    snapshot counters, per-source states, the build info; no digest in a label, no
    ``removed_by`` twin."""
    follower, views = await _followed()
    routing = FollowerRouting(follower, views)
    readiness = FollowerReadiness(follower, ReplayTracker(), ReadyBounds(), lambda: True)

    def families() -> list:  # type: ignore[type-arg]
        live = routing.liveness()
        return [
            *follower_families(follower.metrics, views),
            *recovery_families(readiness.now()),
            *source_families(routing.source_states(), live.heard_s),
        ]

    app = build_app(AppParts(registry_of(families), lambda: (True, "ok"), routing))
    async with HttpServer(app) as server, httpx.AsyncClient() as client:
        text = (await client.get(f"{server.url}/metrics")).text
    names = assert_declared(text)
    follow_metrics = {spec.name for spec in METRICS if "follow" in spec.services}
    never_restored = {"swa_es_follower_restored_generation"}
    only_with_stream_out = {"swa_es_zmq_refusals_total"}  # tests/swa_es/test_cli_zmq_security.py
    assert names == follow_metrics - never_restored - only_with_stream_out
    samples = parse_samples(text)
    assert samples["swa_es_follower_lag_records"] == 0
    assert samples["swa_es_follower_lag_seconds"] == 0
    assert samples["swa_es_follower_ready"] == 1
    assert samples["swa_es_follower_snapshot_failures_total"] == 0
    assert samples['swa_es_source_state{source="w0",state="exact"}'] == 1
    assert samples['swa_es_replica_removed_total{medium="GPU",reason="unsaid",source="w0"}'] == 1
    (version,) = [k for k in samples if k.startswith("swa_es_build_info{")]
    assert samples[version] == 1
    assert "swa_es_replica_digest_info" not in text and "removed_by" not in text


def test_publisher_and_bridge_families_are_declared() -> None:
    """A primary's and a bridge's families: each declared; no digest or epoch label."""
    publisher = PublisherMetrics("w0", max_queue_batches=8, epoch="e1", bytes_published=99)
    registry = registry_of(
        lambda: [
            *publisher_families(publisher, 3, (10, 4)),
            *bridge_families(
                "b0",
                {**BridgeMetrics(received=2).as_dict(), **TierCounters().as_dict()},
                publisher,
                {("CPU", "stored"): 1},
            ),
        ]
    )
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    names = assert_declared(text)
    assert "swa_es_primary_digest_info" not in names and 'epoch="' not in text
    samples = parse_samples(text)
    assert samples['swa_es_publisher_published_bytes_total{source="w0"}'] == 99
    assert samples['swa_es_bridge_received_total{source="b0"}'] == 2
    assert samples['swa_es_primary_cache_tokens{pool="swa",source="w0"}'] == 4


@pytest.mark.parametrize("hot_route", [True, False], ids=["hot route", "through ASGI"])
async def test_the_routing_api_counts_requests_durations_and_refusals(hot_route: bool) -> None:
    """Answers and refusals over real HTTP, on the protocol's hot route and through ASGI:
    requests by route and status, a duration for each by route and outcome, refusals by
    reason (bad body, unsupported type, too large, restoring, wrong method)."""
    follower, views = await _followed()
    state = {"ready": True}

    def health() -> tuple[bool, str]:
        return (True, "ok") if state["ready"] else (False, "restoring")

    parts = AppParts(
        registry_of(list), health, FollowerRouting(follower, views), max_request_bytes=1024
    )
    app = build_app(parts)
    async with HttpServer(app, hot_route=hot_route) as server, httpx.AsyncClient() as client:
        match = f"{server.url}/v1/match"
        binary = b"".join(t.to_bytes(4, "little") for t in range(1, 17))
        octet = {"content-type": "application/octet-stream"}
        for _ in range(3):
            assert (await client.post(match, content=binary, headers=octet)).status_code == 200
        assert (await client.post(match, json={"token_ids": [1, 2]})).status_code == 200
        assert (await client.post(match, content=b"{not json")).status_code == 400
        text_type = {"content-type": "text/plain"}
        assert (await client.post(match, content=b"1", headers=text_type)).status_code == 415
        assert (await client.post(match, content=b"x" * 2048)).status_code == 413
        assert (await client.get(match)).status_code == 405
        state["ready"] = False
        assert (await client.post(match, json={"token_ids": [1]})).status_code == 503
        assert (await client.get(f"{server.url}/v1/sources")).status_code == 503
        assert (await client.get(f"{server.url}/healthz")).status_code == 503
        assert (await client.get(f"{server.url}/nowhere")).status_code == 404
        text = (await client.get(f"{server.url}/metrics")).text
    assert_declared(text)
    samples = parse_samples(text)

    def requests(route: str, code: int) -> float:
        return samples.get(f'swa_es_http_requests_total{{code="{code}",route="{route}"}}', 0)

    assert requests("/v1/match", 200) == 4
    for code in (400, 405, 413, 415, 503):
        assert requests("/v1/match", code) == 1, code
    assert requests("/v1/sources", 503) == requests("/healthz", 503) == 1
    assert requests("other", 404) == 1
    count = 'swa_es_http_request_duration_seconds_count{{outcome="{}",route="/v1/match"}}'
    assert samples[count.format("2xx")] == 4
    assert samples[count.format("4xx")] == 4
    assert samples[count.format("5xx")] == 1
    assert samples['swa_es_http_request_duration_seconds_sum{outcome="2xx",route="/v1/match"}'] > 0
    refusals = refusals_by_reason(samples)
    assert refusals == {
        "bad_body": 1,
        "unsupported_type": 1,
        "too_large": 1,
        "wrong_method": 1,
        "restoring": 2,
    }


async def test_a_head_refused_by_the_protocol_is_counted() -> None:
    """A request head over 8 KiB is refused (431) and counted as a refusal, whether the
    protocol refused it before any route or the app did."""
    follower, views = await _followed()
    app = build_app(
        AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    )
    async with HttpServer(app) as server, httpx.AsyncClient() as client:
        headers = {f"x-filler-{i}": "y" * 1000 for i in range(12)}
        reply = await client.get(f"{server.url}/v1/sources", headers=headers)
        assert reply.status_code == 431
        text = (await client.get(f"{server.url}/metrics")).text
    samples = parse_samples(text)
    assert samples['swa_es_http_refusals_total{reason="head_too_large"}'] == 1
    # refused by the protocol (route "other") or, when the head came whole, by the app
    assert sum(v for k, v in samples.items() if 'code="431"' in k) == 1


async def _raw_exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection; everything the server answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()


async def test_refusals_by_the_connection_protocol_are_counted() -> None:
    """An unfinished head past the protocol's bound (431) and an HTTP version not served
    (505) are refused before any route: counted under route ``other`` and their reasons."""
    follower, views = await _followed()
    app = build_app(
        AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    )
    async with HttpServer(app) as server, httpx.AsyncClient() as client:
        endless = b"GET /v1/sources HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 10_000
        assert (await _raw_exchange(server.port, endless)).startswith(b"HTTP/1.1 431 ")
        version = b"GET /v1/sources HTTP/2.0\r\nHost: x\r\n\r\n"
        assert (await _raw_exchange(server.port, version)).startswith(b"HTTP/1.1 505 ")
        text = (await client.get(f"{server.url}/metrics")).text
    samples = parse_samples(text)
    assert samples['swa_es_http_requests_total{code="431",route="other"}'] == 1
    assert samples['swa_es_http_requests_total{code="505",route="other"}'] == 1
    assert samples['swa_es_http_refusals_total{reason="head_too_large"}'] == 1
    assert samples['swa_es_http_refusals_total{reason="bad_version"}'] == 1
