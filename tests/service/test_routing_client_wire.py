"""``RoutingClient``'s own HTTP/1.1 connection against real servers of other shapes (the
standard library's ``http.server`` in a thread): chunked replies, replies ended by the server
closing, a kept-alive connection the server dropped (retried once), a silent server (timeout)
and a reply that is not HTTP (a typed error, the connection closed)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from swa_es.client import RoutingClient, RoutingConnectionError, RoutingError

SOURCES = {"sources": {"w": {"epoch": "e", "seq": 3}}}
Reply = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def http_server(reply: Reply) -> Iterator[tuple[str, list[int]]]:
    """A threaded ``http.server`` answering every GET with ``reply``; yields its URL and the
    number of connections it accepted (a one-item list, read after requests)."""
    connections = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            connections[0] += 1
            super().setup()

        def do_GET(self) -> None:
            reply(self)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", connections
    finally:
        server.shutdown()
        server.server_close()


def chunked(handler: BaseHTTPRequestHandler) -> None:
    body = orjson.dumps(SOURCES)
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()
    for start in range(0, len(body), 7):
        piece = body[start : start + 7]
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
    handler.wfile.write(b"0\r\n\r\n")


def until_close(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.end_headers()
    handler.wfile.write(orjson.dumps(SOURCES))
    handler.close_connection = True


def drops_after_reply(handler: BaseHTTPRequestHandler) -> None:
    """Keeps nothing alive, without saying so (as an idle timeout does)."""
    body = orjson.dumps(SOURCES)
    handler.send_response(200)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    handler.wfile.flush()
    handler.close_connection = True


def refuses(handler: BaseHTTPRequestHandler) -> None:
    body = orjson.dumps({"error": "no such thing"})
    handler.send_response(404)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.mark.parametrize("reply", [chunked, until_close], ids=["chunked", "until-close"])
def test_replies_framed_either_way_are_read_whole(reply: Reply) -> None:
    with http_server(reply) as (url, _), RoutingClient(url, timeout_s=5) as client:
        for _ in range(3):
            assert client.sources() == SOURCES["sources"]


def test_a_dropped_keep_alive_connection_is_reopened_once() -> None:
    """Every reply's connection is dropped after it: each next request finds its connection
    closed, opens a new one and succeeds."""
    with http_server(drops_after_reply) as (url, connections):
        with RoutingClient(url, timeout_s=5) as client:
            for _ in range(4):
                assert client.sources() == SOURCES["sources"]
        assert connections[0] == 4


def test_a_refusal_is_a_routing_error_with_the_servers_message() -> None:
    with (
        http_server(refuses) as (url, _),
        RoutingClient(url, timeout_s=5) as client,
        pytest.raises(RoutingError, match="no such thing") as caught,
    ):
        client.sources()
    assert caught.value.status == 404


@contextmanager
def raw_server(answer: bytes | None) -> Iterator[str]:
    """A listening socket that reads one request, writes ``answer`` (None: nothing, holding
    the connection open) and closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            if answer is not None:
                connection.sendall(answer)
            else:
                done.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(10)
        listener.close()


def test_a_silent_server_is_a_timeout() -> None:
    with (
        raw_server(None) as url,
        RoutingClient(url, timeout_s=0.2) as client,
        pytest.raises(RoutingConnectionError, match="timed out"),
    ):
        client.sources()


@pytest.mark.parametrize(
    "answer",
    [b"SMTP ready\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n{}"],
    ids=["not-http", "cut-short"],
)
def test_an_unreadable_or_cut_reply_is_a_connection_error(answer: bytes) -> None:
    """Neither is retried (a reply had begun); the message names the request."""
    named = r"GET http://127\.0\.0\.1:[0-9]+/v1/sources"
    with (
        raw_server(answer) as url,
        RoutingClient(url, timeout_s=5) as client,
        pytest.raises(RoutingConnectionError, match=named),
    ):
        client.sources()
