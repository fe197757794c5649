"""The Prometheus text format and the tiny /metrics + /healthz HTTP server."""

from __future__ import annotations

import anyio
import pytest

from swa_es.service import prometheus
from swa_es.service.http import MetricsServer, http_get
from swa_es.service.prometheus import counter, gauge


def test_render_has_help_type_and_escaped_labels() -> None:
    """Families render as HELP, TYPE and one line per sample, label values escaped."""
    text = prometheus.render(
        [
            counter("x_total", "things", 3),
            gauge("y", "a gauge").add(1.5, source='a"b').add(2, source="c"),
        ]
    )
    assert "# TYPE x_total counter\nx_total 3\n" in text
    assert 'y{source="a\\"b"} 1.5' in text
    assert prometheus.parse(text)['y{source="c"}'] == 2.0


async def test_server_answers_metrics_health_and_errors() -> None:
    """GET /metrics returns the rendered text, /healthz the health, others 404/405."""
    state = {"n": 0, "healthy": False}

    def render() -> str:
        state["n"] += 1
        return prometheus.render([counter("hits_total", "renders", state["n"])])

    def health() -> tuple[bool, str]:
        return bool(state["healthy"]), "ready" if state["healthy"] else "starting"

    async with MetricsServer(render, health, host="127.0.0.1", port=0) as server:
        status, body = await http_get("127.0.0.1", server.port, "/metrics")
        assert status == 200
        assert prometheus.parse(body)["hits_total"] == 1
        _, body = await http_get("127.0.0.1", server.port, "/metrics")
        assert prometheus.parse(body)["hits_total"] == 2
        assert await http_get("127.0.0.1", server.port, "/healthz") == (503, "starting\n")
        state["healthy"] = True
        assert await http_get("127.0.0.1", server.port, "/healthz") == (200, "ready\n")
        assert (await http_get("127.0.0.1", server.port, "/nope"))[0] == 404


async def test_server_rejects_other_methods_and_survives_garbage() -> None:
    """A POST gets 405 and a client sending garbage does not stop the server."""
    async with MetricsServer(lambda: "", lambda: (True, "ok"), host="127.0.0.1") as server:
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            await stream.send(b"POST /metrics HTTP/1.1\r\n\r\n")
            reply = await stream.receive()
        assert reply.startswith(b"HTTP/1.1 405")
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            await stream.send(b"\x00\x01garbage\r\n\r\n")
            reply = await stream.receive()
        assert reply.startswith(b"HTTP/1.1 400")
        assert (await http_get("127.0.0.1", server.port, "/healthz"))[0] == 200


async def test_port_is_unknown_outside_the_context() -> None:
    """Asking for the port of a server that is not running is an error."""
    server = MetricsServer(lambda: "", lambda: (True, "ok"))
    with pytest.raises(RuntimeError):
        _ = server.port
