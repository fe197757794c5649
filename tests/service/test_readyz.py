"""``GET /readyz`` over real HTTP: 503 with the readiness document until a real follower is
restored and caught up, then 200; each answer counted under its route and never as a refusal;
``swa_es_follower_ready`` and the ``swa_es_recovery_*`` gauges scraped beside it (declared as
exported); a service with no readiness has no such route."""

from __future__ import annotations

import httpx

from consumers import Follower
from consumers.progress import ReplayTracker
from consumers.readiness import FollowerReadiness, ReadyBounds
from log import MemoryLog
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.service_metrics import recovery_families, registry_of
from swa_es.service.views import StandardViews
from swa_es.testing.metrics import parse_samples
from tests.consumers.primary_model import PrimaryModel, record
from tests.service.test_service_metrics import assert_declared


async def test_readyz_answers_503_until_restored_then_200_with_the_recovery_gauges() -> None:
    """Before the restore: 503 "restoring" (the gauges: not ready, eta unknown); after it:
    200 naming the live source; /readyz's answers are requests, not refusals."""
    log = MemoryLog()
    model = PrimaryModel("w0", page_size=4)
    batches = [model.start_epoch(), *(model.batch(model.store([i, i + 1])) for i in range(5))]
    await log.append_batch([record(b) for b in batches])
    views = StandardViews.create()
    tracker = ReplayTracker()
    follower = Follower(log, views.all, progress=tracker)
    state = {"restored": False}
    readiness = FollowerReadiness(follower, tracker, ReadyBounds(), lambda: state["restored"])
    registry = registry_of(lambda: recovery_families(readiness.now()))
    app = build_app(AppParts(registry, lambda: (True, "ok"), readiness=readiness.check))
    async with HttpServer(app) as server, httpx.AsyncClient() as client:
        before = await client.get(f"{server.url}/readyz")
        assert before.status_code == 503
        assert before.headers["content-type"] == "application/json"
        assert before.json()["reason"] == "restoring"
        scraped_before = parse_samples((await client.get(f"{server.url}/metrics")).text)
        await follower.restore()
        state["restored"] = True
        after = await client.get(f"{server.url}/readyz")
        text = (await client.get(f"{server.url}/metrics")).text
    assert scraped_before["swa_es_follower_ready"] == 0
    assert scraped_before["swa_es_recovery_eta_seconds"] == -1
    assert after.status_code == 200, after.text
    document = after.json()
    assert document["ready"] is True and document["records_to_go"] == 0
    assert document["reason"] == "ready: 1 of 1 live sources caught up"
    assert document["sources"] == {"live": 1, "caught_up": 1, "waiting": {}, "offline": []}
    names = assert_declared(text)
    assert {
        "swa_es_follower_ready",
        "swa_es_recovery_remaining_records",
        "swa_es_recovery_records_per_second",
        "swa_es_recovery_eta_seconds",
    } <= names
    samples = parse_samples(text)
    assert samples["swa_es_follower_ready"] == 1
    assert samples["swa_es_recovery_remaining_records"] == 0
    assert samples["swa_es_recovery_eta_seconds"] == 0
    assert samples["swa_es_recovery_records_per_second"] > 0
    assert samples['swa_es_http_requests_total{code="503",route="/readyz"}'] == 1
    assert samples['swa_es_http_requests_total{code="200",route="/readyz"}'] == 1
    assert not any(key.startswith("swa_es_http_refusals_total{") for key in samples)


async def test_without_readiness_there_is_no_readyz() -> None:
    """A service that gives no readiness (serve, bridge) answers /readyz 404."""
    app = build_app(AppParts(registry_of(list), lambda: (True, "ok")))
    async with HttpServer(app) as server, httpx.AsyncClient() as client:
        assert (await client.get(f"{server.url}/readyz")).status_code == 404
        assert (await client.get(f"{server.url}/healthz")).status_code == 200
