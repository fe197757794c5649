"""Fuzzing the HTTP endpoints of ``swa-es follow`` over real sockets: hostile requests get a clean
answer (the endpoint's 200, or a 4xx), never a 5xx, a crash or a hang; huge requests are refused
without being buffered; slow clients neither starve other clients nor hold a connection forever.

These tests know only HTTP (no server internals), so they hold for any server implementation.
After every hostile request the server must still answer ``GET /healthz``. The corpus in
``tests/data/fuzz/http`` (raw requests) is replayed on every run.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgpack
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.events import encode_batch
from log import open_log
from tests.consumers.primary_model import PrimaryModel
from tests.fuzz.corpus import corpus_files
from tests.fuzz.http_client import (
    ENDPOINTS,
    HOST,
    Answer,
    exchange,
    follower_http,
    get,
    parse_status,
    read_until_closed,
    rss_bytes,
)

HUGE_BODY_BYTES = 64 * 1024 * 1024
SENT_AT_MOST_BYTES = 32 * 1024 * 1024
RSS_GROWTH_LIMIT_BYTES = 24 * 1024 * 1024
SLOW_CLIENTS = 30
STALLED_CLOSE_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """(port, pid) of a ``swa-es follow`` over a small log of two sources."""
    root = tmp_path_factory.mktemp("http-fuzz")
    log_dir = root / "log"

    async def write() -> None:
        models = [PrimaryModel(f"worker-{i}", page_size=2) for i in range(2)]
        batches = [m.start_epoch() for m in models]
        for i in range(20):
            model = models[i % 2]
            batches.append(model.batch(model.store([1, 2, 3, 4, i, i + 1])))
        async with await open_log(log_dir.as_uri()) as log:
            await log.append_batch([(b.source, encode_batch(b)) for b in batches])

    anyio.run(write)
    with follower_http(root, log_dir) as (service, port):
        assert service.process is not None
        yield port, service.process.pid


def _check_answer(
    answer: Answer | None, method: str, target: str, version: str, *, complete: bool
) -> None:
    if answer is None:
        assert not complete, f"{method} {target[:60]!r}: closed without an answer"
        return
    status = answer.status
    path = target.split("?", 1)[0]
    if status == 505:  # "HTTP Version Not Supported" is the right answer to an HTTP/2.0 line
        assert version not in ("HTTP/1.0", "HTTP/1.1"), answer.raw[:200]
        return
    assert status < 500 or (status == 503 and path == "/healthz"), answer.raw[:200]
    if status == 200:
        # HEAD is GET without the body, wherever GET is served
        served = (("GET" if method == "HEAD" else method), path)
        assert served in ENDPOINTS, f"200 for {method} {target[:60]!r}"
    else:
        assert 400 <= status < 500 or status == 503, answer.raw[:200]


def _alive(port: int) -> None:
    assert get(port, "/healthz").status == 200


METHODS = st.sampled_from(
    ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "G\x00T", "get", "BREW"]
)
TARGETS = st.one_of(
    st.sampled_from(
        ["/metrics", "/healthz", "/v1/match", "/v1/sources", "/", "*", "/metrics?x=1", "//healthz"]
    ),
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40).map(
        lambda t: "/" + t
    ),
    st.integers(100, 20000).map(lambda n: "/" + "a" * n),
)
VERSIONS = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1x", "", "HTTP/9"])
HEADER_NAMES = st.sampled_from(
    ["Host", "Content-Type", "Content-Length", "Transfer-Encoding", "X-A", "Bad Name", ""]
)
HEADER_VALUES = st.one_of(
    st.sampled_from(
        ["x", "application/json", "chunked", "-1", "99999999999999999999", "0", "\x00"]
    ),
    st.text(max_size=20),
)
MATCH_BODIES = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"",
            b"{",
            b"null",
            b"[]",
            b'{"token_ids": "abc"}',
            b'{"token_ids": [1, -2]}',
            b'{"token_ids": [1.5]}',
            b'{"token_ids": [true]}',
            b'{"token_ids": [1, 2], "extra_key": 5}',
            b'{"token_ids": [1, 2], "unknown": 1}',
            b'{"token_ids": [18446744073709551616]}',
            b"[" * 10000 + b"]" * 10000,
        ]
    ),
    st.lists(st.integers(-(2**40), 2**40), max_size=50).map(
        lambda ids: orjson.dumps({"token_ids": ids})
    ),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, str, bytes, bool]:
    """(method, target, version, raw request, complete) with random parts."""
    method, target, version = draw(METHODS), draw(TARGETS), draw(VERSIONS)
    body = draw(MATCH_BODIES)
    headers = [
        f"{n}: {v}" for n, v in draw(st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=4))
    ]
    if draw(st.booleans()):
        headers.append(f"Content-Length: {len(body)}")
    head = "\r\n".join([f"{method} {target} {version}".strip(), *headers]) + "\r\n\r\n"
    raw = head.encode("utf-8", "surrogateescape") + body
    complete = True
    if draw(st.integers(0, 9)) == 0:
        raw, complete = raw[: draw(st.integers(0, len(head) - 1))], False
    return method, target, version, raw, complete


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(request=requests())
def test_random_requests_get_a_clean_answer(
    server: tuple[int, int], request: tuple[str, str, str, bytes, bool]
) -> None:
    """Random methods, targets, versions, headers and bodies: the endpoint's answer or a 4xx,
    never a 5xx or a hang; a request cut short may be dropped. The server stays up."""
    port, _ = server
    method, target, version, raw, complete = request
    _check_answer(exchange(port, raw), method, target, version, complete=complete)
    _alive(port)


@pytest.mark.parametrize("path", corpus_files("http"), ids=lambda p: p.stem)
def test_http_corpus(server: tuple[int, int], path: Path) -> None:
    """Every corpus request gets a 4xx (corpus requests are all bad ones), and the server lives."""
    port, _ = server
    answer = exchange(port, path.read_bytes())
    assert answer is not None, "closed without an answer"
    assert 400 <= answer.status < 500, answer.raw[:200]
    _alive(port)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"null",
        b"[]",
        b'{"token_ids": "abc"}',
        b'{"token_ids": [1, -2]}',
        b'{"token_ids": [0.5]}',
        b"\xff\xfe",
    ],
)
def test_bad_json_to_match_is_a_4xx(server: tuple[int, int], body: bytes) -> None:
    """``POST /v1/match`` with a body that is not a valid query: a 4xx."""
    port, _ = server
    request = (
        b"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    answer = exchange(port, request)
    assert answer is not None and 400 <= answer.status < 500, answer
    _alive(port)


CONTENT_TYPES = st.sampled_from(
    [
        "application/octet-stream",
        "application/msgpack",
        "application/x-msgpack",
        "application/json",
        "application/json; charset=utf-8",
        "Application/Octet-Stream",
        "text/plain",
        "",
    ]
)
QUERIES = st.one_of(
    st.sampled_from(
        [
            "",
            "extra_key=k",
            "page_size=16",
            "page_size=0",
            "page_size=-1",
            "extra_key=%ff",
            "page_size=2&extra_key=k",
            "a=b",
            "extra_key",
            "&&",
            "page_size=99999999999999999999",
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=30),
)
MSGPACK_BODIES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # every int msgpack encodes (below -2**63 it raises)
    | st.binary(max_size=40)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(
                ["token_ids", "extra_key", "block_hashes", "page_size", "prompts", "x"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
).map(lambda value: msgpack.packb(value))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    content_type=CONTENT_TYPES,
    query=QUERIES,
    body=st.one_of(st.binary(max_size=300), MSGPACK_BODIES, MATCH_BODIES),
)
def test_match_bodies_of_every_form_get_a_clean_answer(
    server: tuple[int, int], content_type: str, query: str, body: bytes
) -> None:
    """``POST /v1/match`` with random binary, msgpack and JSON bodies, content types and query
    strings: a 200 (with sources) or a 4xx with a JSON error, never a 5xx; the server lives."""
    port, _ = server
    target = "/v1/match" + ("?" + query if query else "")
    head = f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    answer = exchange(port, (head + "Connection: close\r\n\r\n").encode() + body)
    assert answer is not None, "closed without an answer"
    assert answer.status == 200 or 400 <= answer.status < 500, answer.raw[:300]
    reply = orjson.loads(answer.raw.split(b"\r\n\r\n", 1)[1])
    assert ("sources" in reply or "answers" in reply) if answer.status == 200 else "error" in reply
    _alive(port)


def _send_huge(port: int, head: bytes, chunk: bytes) -> tuple[Answer | None, int]:
    """Send ``head`` then ``chunk`` repeatedly (up to ``SENT_AT_MOST_BYTES``) while reading;
    (the answer, bytes of body the server let us send before it answered or closed)."""
    sent = 0
    with socket.create_connection((HOST, port), timeout=15) as sock:
        sock.sendall(head)
        sock.settimeout(0.0)
        data = b""
        try:
            while sent < SENT_AT_MOST_BYTES:
                try:
                    data += sock.recv(65536)
                    break  # answered (or closed) while we were still sending
                except BlockingIOError:
                    pass
                try:
                    sent += sock.send(chunk)
                except BlockingIOError:
                    time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(15)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        data += read_until_closed(sock)
    return (Answer(parse_status(data), data) if data else None), sent


@pytest.mark.parametrize(
    "head",
    [
        f"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Length: {HUGE_BODY_BYTES}\r\n\r\n".encode(),
        b"POST /v1/match HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        f"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {HUGE_BODY_BYTES}\r\n\r\n".encode(),
    ],
    ids=["content-length", "chunked", "get-with-body"],
)
def test_huge_bodies_are_refused_without_buffering(server: tuple[int, int], head: bytes) -> None:
    """A 64 MiB body (declared or chunked): refused with a 4xx or cut off before 32 MiB were
    taken, and the server's memory does not grow by the body."""
    port, pid = server
    before = rss_bytes(pid)
    chunk = b"1000\r\n" + b"[" * 4096 + b"\r\n" if b"chunked" in head else b"1" * 65536
    answer, sent = _send_huge(port, head, chunk)
    assert answer is None or 400 <= answer.status < 500 or (answer.status == 200 and b"GET" in head)
    assert answer is not None or sent < SENT_AT_MOST_BYTES, "the server swallowed 32 MiB of body"
    assert rss_bytes(pid) - before < RSS_GROWTH_LIMIT_BYTES
    _alive(port)


@pytest.mark.parametrize("header_bytes", [16 * 1024, 1024 * 1024])
@pytest.mark.parametrize("target", ["/healthz", "/metrics", "/v1/match"])
def test_huge_request_heads_are_refused(
    server: tuple[int, int], header_bytes: int, target: str
) -> None:
    """A request head of 16 KiB or 1 MiB (one huge header): a 4xx or a cut connection, never
    served, and never buffered whole."""
    port, pid = server
    before = rss_bytes(pid)
    head = (
        f"GET {target} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode() + b"b" * header_bytes + b"\r\n\r\n"
    )
    answer, _ = _send_huge(port, head[:64], head[64:])
    assert answer is None or 400 <= answer.status < 500, answer.raw[:200]
    assert rss_bytes(pid) - before < RSS_GROWTH_LIMIT_BYTES
    _alive(port)


def test_slow_clients_do_not_starve_others(server: tuple[int, int]) -> None:
    """30 clients dribbling a request a byte at a time: meanwhile every normal request is
    answered, and the server's memory stays flat."""
    port, pid = server
    before = rss_bytes(pid)
    stop = threading.Event()
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 200 + b"\r\n\r\n"

    def dribble() -> None:
        try:
            with socket.create_connection((HOST, port), timeout=5) as sock:
                for byte in request:
                    if stop.is_set():
                        return
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
        except OSError:
            pass  # the server may drop a client this slow: allowed

    threads = [threading.Thread(target=dribble, daemon=True) for _ in range(SLOW_CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(20):
            assert get(port, "/healthz").status == 200
            assert get(port, "/metrics").status == 200
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
    assert rss_bytes(pid) - before < RSS_GROWTH_LIMIT_BYTES


def test_a_stalled_client_is_disconnected(server: tuple[int, int]) -> None:
    """A client that sends half a request head and then nothing is disconnected in bounded
    time (a slowloris cannot hold connections forever)."""
    port, _ = server
    started = time.monotonic()
    with socket.create_connection((HOST, port), timeout=STALLED_CLOSE_WITHIN_S) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(STALLED_CLOSE_WITHIN_S)
        try:
            data = sock.recv(65536)
            while data and not data.endswith(b"\r\n\r\n") and sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail(f"a stalled client was still connected after {STALLED_CLOSE_WITHIN_S} s")
    assert time.monotonic() - started < STALLED_CLOSE_WITHIN_S
    _alive(port)
