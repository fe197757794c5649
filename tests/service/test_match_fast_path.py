"""The protocol's own answer to ``POST /v1/match`` over real sockets: the same bytes as the ASGI
path, replies in request order however requests are pipelined, ``Connection: close`` honoured,
and a failing backend answered with 500 and a closed connection."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httptools
import orjson

from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.match_query import Query
from swa_es.service.service_metrics import registry_of
from tests.service.test_routing_forms import PROMPT, serving


@dataclass
class _Replies:
    """httptools callbacks collecting every reply on a connection."""

    replies: list[dict[str, Any]] = field(default_factory=list)
    parser: Any = None

    def on_message_begin(self) -> None:
        self.replies.append({"headers": {}, "body": b""})

    def on_header(self, name: bytes, value: bytes) -> None:
        self.replies[-1]["headers"][name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.replies[-1]["body"] += body

    def on_message_complete(self) -> None:
        self.replies[-1]["status"] = self.parser.get_status_code()


def _exchange(port: int, requests: bytes, expected: int) -> list[dict[str, Any]]:
    """Send ``requests`` at once and read ``expected`` replies (or until the server closes)."""
    collected = _Replies()
    collected.parser = parser = httptools.HttpResponseParser(collected)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(requests)
        while sum("status" in reply for reply in collected.replies) < expected:
            data = sock.recv(65536)
            if not data:
                break
            parser.feed_data(data)
    return collected.replies


def _match(
    body: bytes, *, extra_headers: bytes = b"", content_type: bytes = b"application/octet-stream"
) -> bytes:
    return (
        b"POST /v1/match HTTP/1.1\r\nhost: t\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
        % (content_type, len(body), extra_headers)
        + body
    )


def _u32(tokens: list[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}I", *tokens)


def _chunked(body: bytes) -> bytes:
    return (
        b"POST /v1/match HTTP/1.1\r\nhost: t\r\ncontent-type: application/octet-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )


async def test_replies_to_pipelined_requests_come_in_order(tmp_path: Path) -> None:
    """Matches answered by the protocol and requests answered through ASGI (``/healthz``, a
    chunked body), sent back to back in one write, are answered in the order sent; the last,
    with ``Connection: close``, ends the connection."""
    async with serving(tmp_path) as served:
        requests = b"".join(
            [
                _match(_u32(PROMPT)),
                b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n",
                _match(_u32(PROMPT[:4])),
                _chunked(_u32(PROMPT[:6])),
                _match(_u32(PROMPT[:8]), extra_headers=b"connection: close\r\n"),
            ]
        )
        replies = await anyio.to_thread.run_sync(_exchange, served.port, requests, 5)
        assert [reply["status"] for reply in replies] == [200] * 5
        assert replies[1]["body"] == b"ok\n"
        cached = [
            orjson.loads(replies[index]["body"])["sources"]["c"]["cached_tokens"]
            for index in (0, 2, 3, 4)
        ]
        assert cached == [24, 4, 4, 8]  # source c has pages of 4
        assert replies[4]["headers"][b"connection"] == b"close"


async def test_both_paths_send_the_same_answer(tmp_path: Path) -> None:
    """A plain request (the protocol's answer), a chunked one and an HTTP/1.0 one (the ASGI
    path) get byte-identical bodies, for each body form and for a bad body."""
    async with serving(tmp_path) as served:
        bodies = [
            (_u32(PROMPT), b"application/octet-stream"),
            (orjson.dumps({"token_ids": PROMPT[:9]}), b"application/json"),
            (orjson.dumps({"prompts": [{"token_ids": PROMPT}, {"token_ids": []}]}), b""),
            (b"\x01\x02\x03", b"application/octet-stream"),
        ]
        for body, content_type in bodies:
            headers = b"content-type: %s\r\n" % content_type if content_type else b""
            plain = b"POST /v1/match HTTP/1.1\r\nhost: t\r\n%scontent-length: %d\r\n\r\n%s" % (
                headers,
                len(body),
                body,
            )
            chunked = (
                b"POST /v1/match HTTP/1.1\r\nhost: t\r\n%stransfer-encoding: chunked\r\n\r\n"
                b"%x\r\n%s\r\n0\r\n\r\n" % (headers, len(body), body)
            )
            old = b"POST /v1/match HTTP/1.0\r\n%scontent-length: %d\r\n\r\n%s" % (
                headers,
                len(body),
                body,
            )
            answers = []
            for request in (plain, chunked, old):
                (reply,) = await anyio.to_thread.run_sync(_exchange, served.port, request, 1)
                answers.append((reply["status"], reply["body"]))
            assert answers[0] == answers[1] == answers[2], body[:40]
            assert answers[0][0] == (400 if body == b"\x01\x02\x03" else 200)


async def test_a_server_without_the_hot_route_sends_the_same_reply(tmp_path: Path) -> None:
    """The same plain requests to a server whose protocol answers them and to one that sends
    everything through ASGI: equal statuses, headers (but the date) and bodies."""
    requests = [
        _match(_u32(PROMPT)),
        _match(orjson.dumps({"token_ids": PROMPT[:9]}), content_type=b"application/json"),
        _match(b"\x01\x02\x03"),
        _match(b"{}", content_type=b"text/plain"),
        _match(_u32(PROMPT[:4]), extra_headers=b"connection: close\r\n"),
    ]
    seen = []
    async with (
        serving(tmp_path) as served,
        HttpServer(build_app(served.parts), hot_route=False) as asgi_only,
    ):
        for port in (served.port, asgi_only.port):
            replies = []
            for request in requests:
                (reply,) = await anyio.to_thread.run_sync(_exchange, port, request, 1)
                reply["headers"].pop(b"date")
                replies.append(reply)
            seen.append(replies)
    assert seen[0] == seen[1]
    assert [reply["status"] for reply in seen[0]] == [200, 200, 400, 415, 200]


class _FailingRouting:
    """A routing backend with a bug: every answer raises."""

    def answer(self, query: Query) -> dict[str, dict[str, Any]]:
        raise RuntimeError("a bug in the backend")

    def as_of(self) -> dict[str, Any]:
        return {}

    def sources(self) -> dict[str, dict[str, Any]]:
        return {}


@asynccontextmanager
async def _failing_server() -> AsyncIterator[int]:
    parts = AppParts(registry_of(list), lambda: (True, "ok"), _FailingRouting())
    async with HttpServer(build_app(parts)) as server:
        yield server.port


async def test_a_failing_backend_is_a_500_and_the_connection_closes() -> None:
    """A bug behind the protocol's answer is a JSON 500 that closes the connection (what was
    pipelined behind it is not answered); the server goes on serving new connections."""
    async with _failing_server() as port:
        requests = _match(_u32(PROMPT)) + b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n"
        replies = await anyio.to_thread.run_sync(_exchange, port, requests, 2)
        assert len(replies) == 1
        assert replies[0]["status"] == 500
        assert replies[0]["headers"][b"connection"] == b"close"
        assert orjson.loads(replies[0]["body"]) == {"error": "internal error"}
        (health,) = await anyio.to_thread.run_sync(
            _exchange, port, b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n", 1
        )
        assert health["status"] == 200
