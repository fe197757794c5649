"""The HTTP face of the services: /metrics through prometheus_client, /healthz, on HttpServer."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.core import CounterMetricFamily, Metric

from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.service_metrics import registry_of
from swa_es.testing.metrics import parse_samples


async def test_server_answers_metrics_health_and_errors() -> None:
    """GET /metrics is read at each scrape, /healthz gives the health, others 404/405."""
    state = {"n": 0, "healthy": False}

    def families() -> list[Metric]:
        state["n"] += 1
        family = CounterMetricFamily("hits", "scrapes", labels=["source"])
        family.add_metric(["c"], state["n"])
        return [family]

    def health() -> tuple[bool, str]:
        return bool(state["healthy"]), "ready" if state["healthy"] else "starting"

    app = build_app(AppParts(registry_of(families), health))
    async with HttpServer(app, port=0) as server, httpx.AsyncClient() as client:
        base = f"http://127.0.0.1:{server.port}"
        reply = await client.get(f"{base}/metrics")
        assert reply.status_code == 200
        assert "# TYPE hits_total counter" in reply.text
        assert parse_samples(reply.text)['hits_total{source="c"}'] == 1
        assert (
            parse_samples((await client.get(f"{base}/metrics")).text)['hits_total{source="c"}'] == 2
        )
        reply = await client.get(f"{base}/healthz")
        assert (reply.status_code, reply.text) == (503, "starting\n")
        state["healthy"] = True
        assert (await client.get(f"{base}/healthz")).status_code == 200
        assert (await client.get(f"{base}/nope")).status_code == 404
        assert (await client.post(f"{base}/metrics")).status_code == 405


async def test_port_is_unknown_outside_the_context() -> None:
    """Asking for the port of a server that is not running is an error."""
    server = HttpServer(build_app(AppParts(registry_of(list), lambda: (True, "ok"))))
    with pytest.raises(RuntimeError):
        _ = server.port
