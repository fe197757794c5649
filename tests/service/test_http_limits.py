"""The HTTP server's bounds on its connections, over real sockets: a stalled body, a slow head,
too many connections at once and an idle keep-alive connection are each closed (the first three
answered 408, 408 and 503, and counted as refusals), on the hot route and through ASGI alike.

The servers here run with short limits (``HttpLimits``); each wait is guarded by a bound well
under the defaults, so a server that ignored its limits fails the test instead of passing late.
"""

from __future__ import annotations

import asyncio

import anyio
import httpx
import pytest
from starlette.types import ASGIApp

from swa_es.service import metric_table as table
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_metrics import CONNECTION_REFUSALS
from swa_es.service.http_protocol import KEEP_ALIVE_TIMEOUT_S, HttpLimits
from swa_es.service.http_server import HttpServer
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.testing.metrics import parse_samples, refusals_by_reason
from tests.service.test_service_metrics import _followed

SHORT_S = 0.5
GUARD_S = 3.0
"""Longer than any short limit here, shorter than any default one (``KEEP_ALIVE_TIMEOUT_S``)."""
MATCH_HEAD = (
    b"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n\r\n"
)


async def _server_app() -> ASGIApp:
    follower, views = await _followed()
    return build_app(
        AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    )


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded by ``GUARD_S``)."""
    with anyio.fail_after(GUARD_S):
        return await reader.read()


async def _refusals(server: HttpServer) -> dict[str, float]:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{server.url}/metrics")).text
    return refusals_by_reason(parse_samples(text))


def test_the_new_refusal_reasons_are_declared() -> None:
    """The metric table's help names each refusal the connection protocol makes itself."""
    assert all(reason in table.HTTP_REFUSALS.help for reason in CONNECTION_REFUSALS)


def test_limits_are_checked() -> None:
    """A limit that is no positive number is refused with its name."""
    with pytest.raises(ValueError, match="body_timeout_s"):
        HttpLimits(body_timeout_s=0)
    with pytest.raises(ValueError, match="max_connections"):
        HttpLimits(max_connections=0)


@pytest.mark.parametrize("hot_route", [True, False], ids=["hot_route", "asgi"])
async def test_stalled_bodies_are_answered_408_and_closed(hot_route: bool) -> None:
    """Connections that send a whole head and part of the body, then stall, are each answered
    408 and closed within the body timeout, and counted as ``slow_body``; a body that does
    arrive in time on another connection is served."""
    limits = HttpLimits(body_timeout_s=SHORT_S)
    app = await _server_app()
    async with HttpServer(app, hot_route=hot_route, limits=limits) as server:
        streams = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(20)]
        for _, writer in streams:
            writer.write(MATCH_HEAD + b'{"token_ids": [1')
        await asyncio.gather(*(writer.drain() for _, writer in streams))
        answers = await asyncio.gather(*(_until_closed(reader) for reader, _ in streams))
        for _, writer in streams:
            writer.close()
        async with httpx.AsyncClient() as client:
            served = await client.post(f"{server.url}/v1/match", json={"token_ids": [1, 2, 3]})
        refusals = await _refusals(server)
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers), answers[0]
    assert served.status_code == 200
    assert refusals["slow_body"] == 20


async def test_a_slow_head_is_answered_408_and_an_idle_connection_closed() -> None:
    """A head begun but not finished within the head timeout is answered 408, closed and
    counted as ``slow_head``; a connection that sends nothing is closed silently, uncounted."""
    app = await _server_app()
    limits = HttpLimits(head_timeout_s=SHORT_S)
    async with HttpServer(app, limits=limits) as server:
        slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", server.port)
        slow_writer.write(b"GET /healthz HTTP/1.1\r\nHo")
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
        slow, idle = await asyncio.gather(_until_closed(slow_reader), _until_closed(idle_reader))
        slow_writer.close()
        idle_writer.close()
        refusals = await _refusals(server)
    assert slow.startswith(b"HTTP/1.1 408 ")
    assert idle == b""
    assert refusals == {"slow_head": 1}


async def test_connections_past_the_cap_are_answered_503() -> None:
    """With two connections open, a third is answered 503 as it opens, closed and counted as
    ``too_many_connections``; the two open ones are still served."""
    app = await _server_app()
    async with HttpServer(app, limits=HttpLimits(max_connections=2)) as server:
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", server.port)
        refused = await _until_closed(extra_reader)
        extra_writer.close()
        reader, writer = held[0]
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        served = await _until_closed(reader)
        metrics_reader, metrics_writer = held[1]
        metrics_writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        scraped = await _until_closed(metrics_reader)
        held[1][1].close()
        writer.close()
    assert refused.startswith(b"HTTP/1.1 503 ")
    assert served.startswith(b"HTTP/1.1 200 ")
    assert b'swa_es_http_refusals_total{reason="too_many_connections"} 1.0' in scraped


async def test_an_idle_keep_alive_connection_is_closed() -> None:
    """After a response, a keep-alive connection that sends nothing more is closed after the
    keep-alive timeout (on both routes), and that is
    no refusal."""
    app = await _server_app()
    limits = HttpLimits(keep_alive_timeout_s=SHORT_S)
    async with HttpServer(app, limits=limits) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = b'{"token_ids": [1, 2, 3]}'
        writer.write(
            b"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        rest = await _until_closed(reader)
        writer.close()
        refusals = await _refusals(server)
    assert head.startswith(b"HTTP/1.1 200 ") and b"connection: close" not in head.lower()
    assert rest == b"ok\n"
    assert refusals == {}


def test_the_guard_is_shorter_than_the_default_limits() -> None:
    """The waits above would not pass on a server keeping its default limits."""
    defaults = HttpLimits()
    assert min(defaults.head_timeout_s, defaults.body_timeout_s, KEEP_ALIVE_TIMEOUT_S) > GUARD_S
