"""A raw-socket HTTP client for hostile requests, and the service the HTTP fuzz tests attack.

Raw sockets (not an HTTP library) so a test can send anything: broken request lines, huge
heads, bodies that never end, one byte at a time. Everything has a timeout: a server that hangs
fails the test instead of hanging it.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.compose.services import STARTUP_TIMEOUT_S, Service, follow_service

HOST = "127.0.0.1"
ANSWER_TIMEOUT_S = 15.0
ENDPOINTS = {
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("GET", "/v1/sources"),
    ("POST", "/v1/match"),
}


@dataclass(frozen=True)
class Answer:
    """A response: its status code, and the raw bytes received."""

    status: int
    raw: bytes


def parse_status(data: bytes) -> int:
    """The status code of a response's first line; AssertionError if it is not HTTP."""
    line = data.split(b"\r\n", 1)[0].split(b" ")
    assert len(line) >= 2 and line[0] in (b"HTTP/1.1", b"HTTP/1.0"), (
        f"not an HTTP answer: {data[:80]!r}"
    )
    assert line[1].isdigit() and len(line[1]) == 3, f"bad status line {data[:80]!r}"
    return int(line[1])


def exchange(port: int, request: bytes, *, half_close: bool = True) -> Answer | None:
    """Send ``request``, read until the server closes; None when it closed without a byte."""
    with socket.create_connection((HOST, port), timeout=ANSWER_TIMEOUT_S) as sock:
        try:
            sock.sendall(request)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early and closed; read what it said
        except OSError as exc:  # the same, seen at the shutdown of a socket the server closed
            if exc.errno != errno.ENOTCONN:
                raise
        data = read_until_closed(sock)
    return Answer(parse_status(data), data) if data else None


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (a reset ends it too)."""
    chunks = []
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        except TimeoutError:
            raise AssertionError(
                "the server neither answered nor closed within the timeout"
            ) from None
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def get(port: int, target: str) -> Answer:
    """A plain GET that must be answered."""
    answer = exchange(
        port, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    assert answer is not None, f"GET {target}: closed without an answer"
    return answer


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@contextmanager
def follower_http(workdir: Path, log_dir: Path) -> Iterator[tuple[Service, int]]:
    """A ``swa-es follow`` on ``log_dir`` serving its routing API (which also serves /metrics
    and /healthz); (service, port) once it is restored."""
    service = follow_service(workdir, log_dir.as_uri(), "http", "--http-port", "0").start()
    try:
        status = service.wait_for(
            "a restored follower with an HTTP port",
            lambda s: bool(s.get("http_port")) and bool(s.get("restored")),
            STARTUP_TIMEOUT_S,
        )
        yield service, int(status["http_port"])
    finally:
        service.close()
