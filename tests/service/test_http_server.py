"""The HTTP server as an ASGI server, over real sockets, with a small ASGI app of the test's own:
the scope it is given (``https`` over TLS); chunked and large request bodies, and one the app
does not read yet (left unread, not buffered); pipelined requests answered in order; keep-alive;
``HEAD``; ``Expect: 100-continue``; a streamed (chunked) response, and one on HTTP/1.0
delimited by the close; a large response to a slow reader; an app that fails before and after
starting its response; a client gone mid-body, seen by the app as ``http.disconnect``; a client
that half-closes after its request still answered; unparsable requests and unknown HTTP
versions; and the graceful stop (an answer in progress finishes, an idle connection is closed,
an answer past the grace is cut).

Every read is bounded (``GUARD_S``), so a server that hangs fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httptools
import httpx
import orjson
import trustme
from starlette.types import Receive, Scope, Send

from swa_es.service.http_auth import HttpSecurity
from swa_es.service.http_server import HttpServer

GUARD_S = 5.0
BIG_BYTES = 8 * 1024 * 1024


class _TestApp:
    """An ASGI app answering by path; what it received is recorded in ``seen``."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.disconnected = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        handler = getattr(self, "_" + scope["path"].strip("/").replace("-", "_"), None)
        if handler is None:
            await _reply(send, 404, b"no such path")
            return
        await handler(scope, receive, send)

    async def _echo(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The body read to its end, and how many ``http.request`` messages it came in."""
        body, messages = await _read_body(receive)
        await _reply(send, 200, orjson.dumps({"bytes": len(body), "messages": messages}) + body)

    async def _scope(self, scope: Scope, receive: Receive, send: Send) -> None:
        shown = {key: value for key, value in scope.items() if key != "headers"}
        shown["headers"] = [[name.decode(), value.decode()] for name, value in scope["headers"]]
        for key in ("raw_path", "query_string"):
            shown[key] = shown[key].decode()
        await _reply(send, 200, orjson.dumps(shown))

    async def _slow(self, scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.2)
        await _reply(send, 200, b"slow")

    async def _held(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answers once ``release`` is set."""
        self.seen.append("held")
        await self.release.wait()
        await _reply(send, 200, b"released")

    async def _fast(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _reply(send, 200, b"fast " + scope["query_string"])

    async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Three parts, no ``Content-Length``, a pause between them."""
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _big(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``BIG_BYTES`` in 64 KiB parts, with their length."""
        headers = [(b"content-length", b"%d" % BIG_BYTES)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        part = bytes(range(256)) * 256
        for _ in range(BIG_BYTES // len(part) - 1):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": part})

    async def _unread(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Reads nothing until ``release`` is set, then answers the size of the first body
        message (what the server had buffered meanwhile)."""
        self.seen.append("unread")
        await self.release.wait()
        message = await receive()
        await _reply(send, 200, b"%d" % len(message["body"]))

    async def _ignore_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _reply(send, 200, b"not read")

    async def _fail(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug in the app")

    async def _fail_late(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-length", b"10")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"12345", "more_body": True})
        raise RuntimeError("a bug in the app, half way")

    async def _watch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Records every message until the client is gone."""
        while True:
            message = await receive()
            self.seen.append((message["type"], len(message.get("body", b""))))
            if message["type"] == "http.disconnect":
                self.disconnected.set()
                return


async def _read_body(receive: Receive) -> tuple[bytes, int]:
    parts, messages = [], 0
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        parts.append(message["body"])
        messages += 1
        if not message["more_body"]:
            return b"".join(parts), messages


async def _reply(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Responses:
    """httptools callbacks collecting the responses on one connection."""

    def __init__(self) -> None:
        self.done: list[dict[str, Any]] = []
        self.parser = httptools.HttpResponseParser(self)
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []

    def on_message_begin(self) -> None:
        self._headers, self._body = {}, []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        self.done.append({"status": status, "headers": self._headers, "body": b"".join(self._body)})


async def _responses(
    reader: asyncio.StreamReader, count: int, *, to_close: bool = False
) -> list[dict[str, Any]]:
    """``count`` responses read from ``reader`` (fewer when the server closes first; with
    ``to_close``, read on until it closes)."""
    collected = _Responses()
    with anyio.fail_after(GUARD_S):
        while to_close or len(collected.done) < count:
            data = await reader.read(65536)
            if not data:
                break
            collected.parser.feed_data(data)
    return collected.done


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    with anyio.fail_after(GUARD_S):
        return await reader.read()


@asynccontextmanager
async def _serving(app: _TestApp) -> AsyncIterator[HttpServer]:
    async with HttpServer(app) as server:
        yield server


@asynccontextmanager
async def _connection(
    server: HttpServer,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def test_the_scope_says_what_was_asked() -> None:
    """Method, version, scheme, a percent-decoded path beside the raw one, the query string,
    lower-case header names, client and server addresses, the ASGI version."""
    async with _serving(_TestApp()) as server, _connection(server) as (reader, writer):
        writer.write(b"GET /sc%6fpe?a=1&b=%20 HTTP/1.1\r\nHost: x\r\nX-Thing: Value  \r\n\r\n")
        (response,) = await _responses(reader, 1)
        client_port = writer.get_extra_info("sockname")[1]
    scope = orjson.loads(response["body"])
    assert scope["type"] == "http"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.3"}
    assert (scope["method"], scope["http_version"], scope["scheme"]) == ("GET", "1.1", "http")
    assert (scope["path"], scope["raw_path"]) == ("/scope", "/sc%6fpe")
    assert scope["query_string"] == "a=1&b=%20"
    assert scope["root_path"] == ""
    assert scope["headers"] == [["host", "x"], ["x-thing", "Value"]]
    assert scope["client"] == ["127.0.0.1", client_port]
    assert scope["server"] == ["127.0.0.1", server.port]


async def test_over_tls_the_scheme_is_https() -> None:
    """A server with a TLS context: the app's scope says ``https``; keep-alive holds."""
    ca = trustme.CA()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)
    verify = ssl.create_default_context()
    ca.configure_trust(verify)
    security = HttpSecurity(tls=tls)
    async with (
        HttpServer(_TestApp(), security=security) as server,
        httpx.AsyncClient(verify=verify) as client,
    ):
        first = await client.get(f"{server.url}/scope")
        second = await client.get(f"{server.url}/fast")
    assert server.url.startswith("https://")
    assert orjson.loads(first.content)["scheme"] == "https"
    assert second.text == "fast "


async def test_a_chunked_request_body_reaches_the_app_whole() -> None:
    """A body in chunked transfer coding, sent in pieces: the app reads all of it, in one or
    more ``http.request`` messages, the last with ``more_body`` false."""
    body = bytes(range(256)) * 40
    async with _serving(_TestApp()) as server, _connection(server) as (reader, writer):
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(body), 3000):
            piece = body[start : start + 3000]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        (response,) = await _responses(reader, 1)
    head, echoed = response["body"].split(b"}", 1)
    assert response["status"] == 200
    assert orjson.loads(head + b"}")["bytes"] == len(body)
    assert echoed == body


async def test_a_large_request_body_is_read_as_the_app_reads_it() -> None:
    """8 MiB of body to an app that reads it all: it arrives whole (reading pauses while the
    app has a lot unread, and resumes as it reads)."""
    body = bytes(range(256)) * (BIG_BYTES // 256)
    async with _serving(_TestApp()) as server, _connection(server) as (reader, writer):
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        writer.write(body)
        (response,) = await _responses(reader, 1)
    assert response["body"].endswith(body)
    assert orjson.loads(response["body"].split(b"}", 1)[0] + b"}")["bytes"] == len(body)


async def test_a_body_the_app_does_not_read_is_not_buffered() -> None:
    """A client sending a 64 MiB body to an app that reads none of it yet: the server stops
    reading (the client's writes stall) with well under a MiB buffered."""
    app = _TestApp()
    part = b"x" * (1024 * 1024)
    sent = 0
    async with _serving(app) as server, _connection(server) as (reader, writer):
        writer.write(
            b"POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (64 * len(part))
        )
        try:
            while sent < 64 * len(part):
                writer.write(part)
                await asyncio.wait_for(writer.drain(), 0.5)
                sent += len(part)
        except TimeoutError:
            pass  # the server stopped reading
        app.release.set()
        with anyio.fail_after(GUARD_S):
            head = await reader.readuntil(b"\r\n\r\n")
            buffered = await reader.readexactly(
                int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            )
    assert sent < 48 * len(part), "the server read on while the app read nothing"
    assert int(buffered) < 1024 * 1024


async def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    """Requests sent back to back, the first slow to answer: the answers come in the order
    asked, on the same kept-alive connection; the last asked to close it."""
    async with _serving(_TestApp()) as server, _connection(server) as (reader, writer):
        writer.write(
            b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /fast?1 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /fast?2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        responses = await _responses(reader, 4, to_close=True)
    bodies = [response["body"] for response in responses]
    assert bodies[0] == b"slow" and bodies[1] == b"fast 1" and bodies[3] == b"fast 2"
    assert bodies[2].endswith(b"abc")
    assert [response["headers"].get(b"connection") for response in responses] == [
        None,
        None,
        None,
        b"close",
    ]


async def test_head_is_answered_without_a_body() -> None:
    """``HEAD``: the head the app gave (its ``Content-Length`` kept), no body bytes; the
    connection then serves the next request."""
    async with _serving(_TestApp()) as server, _connection(server) as (reader, writer):
        writer.write(b"HEAD /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        with anyio.fail_after(GUARD_S):
            head = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        rest = await _until_closed(reader)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length: 5\r\n" in head
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(b"\r\n\r\nfast ")


async def test_expect_100_continue_is_answered_when_the_app_reads() -> None:
    """``Expect: 100-continue``: ``100 Continue`` comes once the app asks for the body (the
    client sends the body only then), then the answer. An app that answers without reading
    sends no ``100 Continue`` and the connection closes (the client may never send it)."""
    async with _serving(_TestApp()) as server:
        async with _connection(server) as (reader, writer):
            writer.write(
                b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            with anyio.fail_after(GUARD_S):
                interim = await reader.readuntil(b"\r\n\r\n")
            writer.write(b"hello")
            (response,) = await _responses(reader, 1)
        async with _connection(server) as (reader, writer):
            writer.write(
                b"POST /ignore-body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            refused = await _until_closed(reader)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert response["status"] == 200 and response["body"].endswith(b"hello")
    assert refused.startswith(b"HTTP/1.1 200 OK\r\n") and b"100 Continue" not in refused
    assert b"connection: close\r\n" in refused and refused.endswith(b"not read")


async def test_a_streamed_response_is_sent_chunked() -> None:
    """A response without ``Content-Length`` streamed in parts: chunked transfer coding on
    HTTP/1.1 (the connection kept), delimited by the close on HTTP/1.0."""
    async with _serving(_TestApp()) as server:
        async with _connection(server) as (reader, writer):
            writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            (chunked,) = await _responses(reader, 1)
            writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            (after,) = await _responses(reader, 1)
        async with _connection(server) as (reader, writer):
            writer.write(b"GET /stream HTTP/1.0\r\n\r\n")
            old = await _until_closed(reader)
    assert chunked["headers"][b"transfer-encoding"] == b"chunked"
    assert chunked["body"] == b"one,two,three"
    assert after["body"] == b"fast "
    head, body = old.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body == b"one,two,three"


async def test_a_large_response_reaches_a_slow_reader_whole() -> None:
    """8 MiB answered to a client that reads slowly: every byte arrives, in order (the app
    waits while the transport's buffer is full)."""
    async with _serving(_TestApp()) as server, _connection(server) as (reader, writer):
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await asyncio.sleep(0.3)  # the server fills its buffers meanwhile
        data = await _until_closed(reader)
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert body == bytes(range(256)) * (BIG_BYTES // 256)


async def test_an_app_error_is_a_500_before_the_response_and_a_close_after() -> None:
    """An app that raises before starting its response: 500, connection closed. After
    starting it: the connection is closed mid-response. The server serves on."""
    async with _serving(_TestApp()) as server:
        async with _connection(server) as (reader, writer):
            writer.write(b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\nGET /fast HTTP/1.1\r\n\r\n")
            early = await _until_closed(reader)
        async with _connection(server) as (reader, writer):
            writer.write(b"GET /fail-late HTTP/1.1\r\nHost: x\r\n\r\n")
            late = await _until_closed(reader)
        async with _connection(server) as (reader, writer):
            writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            (served,) = await _responses(reader, 1)
    assert early.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"connection: close\r\n" in early and early.count(b"HTTP/1.1") == 1
    assert late.startswith(b"HTTP/1.1 200 OK\r\n") and late.endswith(b"\r\n\r\n12345")
    assert served["status"] == 200


async def test_a_client_gone_mid_body_is_a_disconnect_to_the_app() -> None:
    """A client that sends part of a body and closes: the app gets what came, then
    ``http.disconnect``."""
    app = _TestApp()
    async with _serving(app) as server:
        async with _connection(server) as (_, writer):
            writer.write(b"POST /watch HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            writer.write(b"0123456789")
            await writer.drain()
            with anyio.fail_after(GUARD_S):
                while not app.seen:  # noqa: ASYNC110 -- the app records, nothing to await
                    await asyncio.sleep(0.01)
        with anyio.fail_after(GUARD_S):
            await app.disconnected.wait()
    assert app.seen == [("http.request", 10), ("http.disconnect", 0)]


async def test_a_half_closed_client_still_gets_its_answer() -> None:
    """A client that sends whole requests and shuts its side (``SHUT_WR``) is answered, then
    the connection closes."""
    async with _serving(_TestApp()) as server:

        def exchange() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_S) as sock:
                sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /fast HTTP/1.1\r\n\r\n")
                sock.shutdown(socket.SHUT_WR)
                chunks = []
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
                return b"".join(chunks)

        data = await anyio.to_thread.run_sync(exchange)
    assert data.count(b"HTTP/1.1 200 OK") == 2
    assert data.index(b"slow") < data.index(b"fast ")


async def test_bad_requests_are_answered_400_and_unknown_versions_505() -> None:
    """An unparsable request: 400 and closed; HTTP/2.0 in a request line: 505; a request line
    without a version (HTTP/0.9): 400. The server serves on."""
    answers = []
    async with _serving(_TestApp()) as server:
        for request in (
            b"GET /fast HTTP/1.1\r\nBad Header\r\n\r\n",
            b"GET /fast HTTP/2.0\r\nHost: x\r\n\r\n",
            b"GET /fast\r\n\r\n",
            b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP AT ALL\r\n\r\n",
        ):
            async with _connection(server) as (reader, writer):
                writer.write(request)
                answers.append(await _until_closed(reader))
    assert answers[0].startswith(b"HTTP/1.1 400 ")
    assert answers[1].startswith(b"HTTP/1.1 505 ")
    assert answers[2].startswith(b"HTTP/1.1 400 ")
    served, _, refused = answers[3].partition(b"fast ")
    assert served.startswith(b"HTTP/1.1 200 OK") and refused.startswith(b"HTTP/1.1 400 ")


async def test_stopping_finishes_the_answer_in_progress_and_closes_idle_connections() -> None:
    """On exit the server accepts no more connections, closes an idle one at once, and lets
    an answer in progress finish (with ``connection: close``) before it returns."""
    app = _TestApp()
    server = HttpServer(app)
    await server.__aenter__()
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", server.port)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
    busy_writer.write(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
    with anyio.fail_after(GUARD_S):
        while not app.seen:  # noqa: ASYNC110 -- the app records, nothing to await
            await asyncio.sleep(0.01)
    stopping = asyncio.create_task(server.__aexit__(None, None, None))
    idle = await _until_closed(idle_reader)
    assert not stopping.done()
    app.release.set()
    answer = await _until_closed(busy_reader)
    with anyio.fail_after(GUARD_S):
        await stopping
    busy_writer.close()
    idle_writer.close()
    assert idle == b""
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"released")
    assert b"connection: close\r\n" in answer
    refused: list[BaseException] = []
    try:
        await asyncio.open_connection("127.0.0.1", server.port)
    except OSError as exc:
        refused.append(exc)
    assert refused, "the stopped server still accepts connections"


async def test_a_stopping_server_cuts_an_answer_past_its_grace() -> None:
    """An answer still in progress after the grace is cut: the connection closes, the app's
    task is cancelled, and the server's exit returns."""
    app = _TestApp()
    server = HttpServer(app)
    await server.__aenter__()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
    with anyio.fail_after(GUARD_S):
        while not app.seen:  # noqa: ASYNC110 -- the app records, nothing to await
            await asyncio.sleep(0.01)
        await server.__aexit__(None, None, None)
    assert await _until_closed(reader) == b""
    writer.close()
