"""Fuzzing the HTTP server's bearer-token check and the ``POST /v1/feedback`` route over real
sockets, against a real ``swa-es follow --http-token-file``.

Authorization headers missing, duplicated, of other schemes, malformed, with bytes outside
ASCII, or huge, on every route (the hot ``POST /v1/match`` included, which the connection
protocol checks itself): the request is served only with exactly one header carrying a known
token (or on an open path); otherwise it gets 401, 403, 400 or 431 (a huge head may be cut
instead), never a 5xx or a hang, and the server goes on serving an authenticated client.
Feedback bodies (valid, mutated, arbitrary) from an authenticated client get 200, 400 or 415.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.events import encode_batch
from log import open_log
from tests.compose.services import STARTUP_TIMEOUT_S, follow_service
from tests.consumers.primary_model import PrimaryModel
from tests.fuzz.feedback_bodies import ENCODERS, MUTATIONS, REPORT_LISTS, mutate
from tests.fuzz.http_client import Answer, exchange

TOKEN = "fuzz-Token_0123456789~+/="
OTHER = "not-the-token"
MATCH_BODY = orjson.dumps({"token_ids": [1, 2, 3, 4]})
REFUSED = {400, 401, 403, 431}
"""What a request without exactly one known bearer token may get (on a guarded path)."""


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The routing API's port of a ``swa-es follow`` asking for ``TOKEN`` (a small log of two
    sources behind it)."""
    root = tmp_path_factory.mktemp("http-auth-fuzz")
    log_dir = root / "log"
    tokens = root / "tokens"
    tokens.write_text(f"# the fuzz client's token\n{TOKEN}\n")
    tokens.chmod(0o600)

    async def write() -> None:
        models = [PrimaryModel(f"worker-{i}", page_size=2) for i in range(2)]
        batches = [m.start_epoch() for m in models]
        for i in range(10):
            model = models[i % 2]
            batches.append(model.batch(model.store([1, 2, 3, 4, i, i + 1])))
        async with await open_log(log_dir.as_uri()) as log:
            await log.append_batch([(b.source, encode_batch(b)) for b in batches])

    anyio.run(write)
    service = follow_service(
        root, log_dir.as_uri(), "auth", "--http-port", "0", "--http-token-file", str(tokens)
    ).start()
    try:
        status = service.wait_for(
            "a restored follower with an HTTP port",
            lambda s: bool(s.get("http_port")) and bool(s.get("restored")),
            STARTUP_TIMEOUT_S,
        )
        yield int(status["http_port"])
    finally:
        service.close()


def request(
    method: str, target: str, headers: list[bytes], body: bytes = b"", content_type: str = ""
) -> bytes:
    """The raw bytes of one request (``Connection: close``)."""
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: x", *headers]
    if content_type:
        lines.append(f"Content-Type: {content_type}".encode())
    lines += [f"Content-Length: {len(body)}".encode(), b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def bearer(token: str) -> bytes:
    return f"Authorization: Bearer {token}".encode()


def served(port: int) -> None:
    """An authenticated client is served, on the hot route and through the app."""
    for method, target, body in (("POST", "/v1/match", MATCH_BODY), ("GET", "/v1/sources", b"")):
        answer = exchange(port, request(method, target, [bearer(TOKEN)], body))
        assert answer is not None and answer.status == 200, answer


ROUTES = st.sampled_from(
    [
        ("POST", "/v1/match", MATCH_BODY),
        ("GET", "/v1/sources", b""),
        ("GET", "/metrics", b""),
        ("GET", "/v1/quality", b""),
        ("GET", "/healthz", b""),
    ]
)
AUTH_NAMES = st.sampled_from([b"Authorization", b"authorization", b"AUTHORIZATION"])
AUTH_VALUES = st.one_of(
    st.sampled_from(
        [
            b"Bearer " + TOKEN.encode(),
            b"bearer " + TOKEN.encode(),
            b"BEARER  " + TOKEN.encode() + b"  ",
            b"Bearer " + OTHER.encode(),
            b"Bearer",
            b"Bearer ",
            b"Basic " + TOKEN.encode(),
            TOKEN.encode(),
            b"",
            b"Bearer " + TOKEN.encode() + b"x",
            b"Bearer " + TOKEN.encode()[:-1],
            b"Bearer \xff\xfe\x80",
            b"Bearer " + TOKEN.encode() + b"\t",
            b"Bearer " + TOKEN.encode() + b", Bearer " + TOKEN.encode(),
        ]
    ),
    st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    st.binary(max_size=40).map(lambda b: b"Bearer " + b.replace(b"\r", b"").replace(b"\n", b"")),
    st.sampled_from([4_000, 9_000, 70_000]).map(lambda n: b"Bearer " + b"A" * n),
)


def _known(value: bytes) -> bool:
    """Whether ``value`` is an Authorization value carrying ``TOKEN`` (whitespace around the
    credentials is the parser's to strip)."""
    scheme, _, credentials = value.strip(b" \t").partition(b" ")
    return scheme.lower() == b"bearer" and credentials.strip(b" \t") == TOKEN.encode()


def _check(answer: Answer | None, path: str, headers: list[tuple[bytes, bytes]]) -> None:
    size = sum(len(n) + len(v) for n, v in headers)
    if answer is None:
        assert size > 8 * 1024, "closed without an answer"  # a huge head may be cut
        return
    status = answer.status
    assert status < 500, answer.raw[:300]
    if path == "/healthz":
        return
    if len(headers) == 1 and _known(headers[0][1]) and size <= 8 * 1024:
        assert status == 200, answer.raw[:300]
    else:
        assert status in REFUSED, answer.raw[:300]
        if status in (401, 403):
            assert b"www-authenticate: bearer" in answer.raw.lower()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    route=ROUTES,
    headers=st.lists(st.tuples(AUTH_NAMES, AUTH_VALUES), max_size=3),
    before=st.booleans(),
)
def test_authorization_headers_of_every_shape(
    port: int, route: tuple[str, str, bytes], headers: list[tuple[bytes, bytes]], before: bool
) -> None:
    """Zero to three Authorization headers of any shape on each route: served with exactly one
    known token, else refused with 400/401/403/431; never a 5xx or a hang; the server lives."""
    method, path, body = route
    lines = [name + b": " + value for name, value in headers]
    other = [b"X-Other: 1"]
    raw = request(method, path, other + lines if before else lines + other, body)
    _check(exchange(port, raw), path, headers)
    served(port)


@pytest.mark.parametrize("count", [2, 50])
def test_many_authorization_headers(port: int, count: int) -> None:
    """The known token sent 2 or 50 times: refused (401, the header must be one), never a 5xx,
    on the hot route and through the app."""
    for method, path, body in (("POST", "/v1/match", MATCH_BODY), ("GET", "/v1/sources", b"")):
        answer = exchange(port, request(method, path, [bearer(TOKEN)] * count, body))
        assert answer is not None and answer.status == 401, answer
    served(port)


FEEDBACK_TYPES = st.sampled_from(sorted(ENCODERS))


@st.composite
def feedback_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """(content type, body): valid, mutated, or arbitrary."""
    content_type = draw(FEEDBACK_TYPES)
    kind = draw(st.sampled_from(["valid", "mutated", "arbitrary"]))
    if kind == "arbitrary":
        return content_type, draw(st.binary(max_size=300))
    body = ENCODERS[content_type](draw(REPORT_LISTS))
    if kind == "mutated":
        for mutation in draw(st.lists(MUTATIONS, min_size=1, max_size=3)):
            body = mutate(body, mutation)
    return content_type, body


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=feedback_bodies(), authenticated=st.booleans())
def test_feedback_bodies_over_a_socket(
    port: int, case: tuple[str, bytes], authenticated: bool
) -> None:
    """``POST /v1/feedback`` with valid, mutated and arbitrary bodies: with the token a 200
    (the reports counted) or a 400/415 naming the problem, without it a 401; never a 5xx."""
    content_type, body = case
    headers = [bearer(TOKEN)] if authenticated else []
    answer = exchange(port, request("POST", "/v1/feedback", headers, body, content_type))
    assert answer is not None, "closed without an answer"
    reply: dict[str, Any] = {}
    with contextlib.suppress(orjson.JSONDecodeError):
        reply = orjson.loads(answer.raw.split(b"\r\n\r\n", 1)[1])
    if not authenticated:
        assert answer.status == 401, answer.raw[:300]
    elif answer.status == 200:
        assert {"accepted", "incorrect", "unpredicted"} <= set(reply), answer.raw[:300]
    else:
        assert answer.status in (400, 415) and reply.get("error"), answer.raw[:300]
    served(port)


def test_a_huge_feedback_body_is_refused(port: int) -> None:
    """A feedback body over the request limit (4 MiB): 413, and the server lives."""
    body = b"[" * (5 * 1024 * 1024)
    answer = exchange(port, request("POST", "/v1/feedback", [bearer(TOKEN)], body, "text/x"))
    assert answer is None or answer.status == 413, answer.raw[:300]
    served(port)
