"""One blocking HTTP/1.1 keep-alive connection, for ``RoutingClient``.

A request leaves in one ``sendall`` (head and body together, Nagle off) and the reply is parsed
by httptools (llhttp, the parser the server uses): on the loopback the standard library's
``http.client`` costs about as much per request as the whole server does, mostly in sending
the head and the body apart and in parsing the reply's headers in Python.

Only what the routing API needs: GET and POST requests with a ``Content-Length`` body (or
none); replies with a ``Content-Length``, chunked, or ended by the server closing the
connection. Over TLS when given a context (``tls_context`` makes one from a CA file and a client
certificate), with an ``Authorization: Bearer`` header on every request when given a token.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httptools

from cache.errors import SwaEsError

HEADS_KEPT: Final = 64
"""Request heads a connection keeps made (targets differ by namespace: a bound on them)."""
RECV_BYTES: Final = 64 * 1024
"""Bytes asked of each ``recv`` (kept under malloc's mmap threshold: a larger buffer may be
mapped and unmapped on every call)."""


_TOKEN68: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""A bearer token's characters (RFC 6750)."""


def bearer_value(token: str) -> str:
    """The ``Authorization`` header's value sending ``token``: ``Bearer TOKEN``; ``ValueError``
    for a token with characters a bearer token cannot have (a line break would forge headers)."""
    if _TOKEN68.fullmatch(token) is None:
        raise ValueError("token must be a bearer token: letters, digits and -._~+/, = padding")
    return f"Bearer {token}"


def bearer_header(token: str) -> bytes:
    """The ``Authorization`` header line (CRLF included) sending ``token`` (``bearer_value``)."""
    return b"authorization: %s\r\n" % bearer_value(token).encode("ascii")


def tls_context(
    ca_file: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
) -> ssl.SSLContext:
    """A client's TLS context: the server's certificate checked against ``ca_file`` (None: the
    system's CAs) and its name; ``client_cert`` (with ``client_key`` unless the key is in the
    same file) presented where the server asks for one (mutual TLS)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_cert is not None:
        context.load_cert_chain(client_cert, client_key)
    elif client_key is not None:
        raise ValueError("client_key needs client_cert")
    return context


class ConnectionClosedError(SwaEsError, ConnectionError):
    """The server closed the connection; ``replied`` says whether any reply byte had come
    (when none had, on a reused connection, the request may be sent again)."""

    def __init__(self, message: str, *, replied: bool) -> None:
        super().__init__(message)
        self.replied = replied


class BadReplyError(SwaEsError, ConnectionError):
    """The server's reply is not HTTP/1.1 the parser reads."""


@dataclass(slots=True)
class Reply:
    """A whole reply: status, body, and whether the server keeps the connection open."""

    status: int = 0
    body: bytes = b""
    keep_alive: bool = True
    content_type: str | None = None


@dataclass(slots=True)
class _ReplyReader:
    """httptools callbacks collecting one reply."""

    parts: list[bytes] = field(default_factory=list)
    headers_done: bool = False
    complete: bool = False
    keep_alive: bool = False
    """Whether the server keeps the connection (read while the parser still knows)."""
    framed: bool = False
    """Whether the reply says where it ends (a length, or chunks)."""
    parser: httptools.HttpResponseParser | None = None
    content_type: str | None = None

    def start(self) -> None:
        """Forget the last reply (the parser reads the connection's replies one after another)."""
        self.parts = []
        self.headers_done = self.complete = self.keep_alive = self.framed = False
        self.content_type = None

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            self.framed = True
        elif name == b"content-type":
            self.content_type = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        assert self.parser is not None
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True


def _send_parts(sock: socket.socket, head: bytes, body: bytes) -> None:
    """Send ``head`` then ``body`` in one gathered write (no copy of the body into one buffer),
    then whatever a short write left."""
    sent = sock.sendmsg((head, body))
    total = len(head) + len(body)
    if sent < total:
        sock.sendall((head + body)[sent:])


class HttpConnection:
    """A keep-alive connection to ``host:port``, opened on first use; not thread-safe.

    ``timeout_s`` bounds connecting (the TLS handshake included) and each wait for the server.
    ``tls``: speak TLS with this context (the server's name checked against ``host``);
    ``token``: send it as ``Authorization: Bearer`` on every request.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        self._address = (host, port)
        name = f"[{host}]" if ":" in host else host  # an IPv6 literal is bracketed
        self._host_header = f"{name}:{port}".encode("idna")
        self._timeout_s = timeout_s
        self._tls = tls
        self._authorization = b"" if token is None else bearer_header(token)
        self._sock: socket.socket | None = None
        self._heads: dict[tuple[str, str, str | None, str | None], bytes] = {}
        """Request heads made, by method, target and types (a router asks a few forms)."""
        self._reader = _ReplyReader()
        self._parser = self._reader.parser = httptools.HttpResponseParser(self._reader)
        """Reads the replies of one connection, one after another (made anew per connection)."""

    @property
    def is_open(self) -> bool:
        """Whether a connection is open (a request would reuse it)."""
        return self._sock is not None

    def exchange(
        self,
        method: str,
        target: str,
        content_type: str | None,
        body: bytes | None,
        accept: str | None = None,
    ) -> Reply:
        """Send one request (asking for a reply of type ``accept`` when given) and read its
        whole reply.

        Raises ``ConnectionClosedError``, ``BadReplyError`` or ``OSError`` (``TimeoutError``
        included); the connection is closed after any of them.
        """
        key = (method, target, content_type, accept)
        head = self._heads.get(key)
        if head is None:
            head = self._head(*key)
            if len(self._heads) < HEADS_KEPT:
                self._heads[key] = head
        if body is not None:
            head += b"content-length: %d\r\n" % len(body)
        try:
            sock = self._connect()
            if body is None or self._tls is not None:
                sock.sendall(head + b"\r\n" + body if body is not None else head + b"\r\n")
            else:
                _send_parts(sock, head + b"\r\n", body)
            return self._read_reply(sock)
        except BaseException:
            self.close()
            raise

    def _head(
        self, method: str, target: str, content_type: str | None, accept: str | None
    ) -> bytes:
        """A request's head up to its length: request line, host, token, types."""
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n%s" % (
            method.encode("ascii"),
            target.encode("ascii"),
            self._host_header,
            self._authorization,
        )
        if content_type is not None:
            head += b"content-type: %s\r\n" % content_type.encode("latin-1")
        if accept is not None:
            head += b"accept: %s\r\n" % accept.encode("latin-1")
        return head

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection(self._address, timeout=self._timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                try:
                    sock = self._tls.wrap_socket(sock, server_hostname=self._address[0])
                except BaseException:
                    sock.close()
                    raise
            self._sock = sock
            self._parser = self._reader.parser = httptools.HttpResponseParser(self._reader)
        return self._sock

    def _read_reply(self, sock: socket.socket) -> Reply:
        reader, parser = self._reader, self._parser
        reader.start()
        received = False
        while not reader.complete:
            data = sock.recv(RECV_BYTES)
            if not data:
                if reader.headers_done and not reader.framed:
                    break  # a reply without a length ends where the connection does
                raise ConnectionClosedError(
                    "the server closed the connection before the reply ended", replied=received
                )
            received = True
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as exc:
                raise BadReplyError(f"unreadable reply: {exc}") from None
        if not reader.keep_alive:
            self.close()
        body = b"".join(reader.parts) if len(reader.parts) != 1 else reader.parts[0]
        return Reply(parser.get_status_code(), body, reader.keep_alive, reader.content_type)
