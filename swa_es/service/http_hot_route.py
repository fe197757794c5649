"""The routing API's hot route: a plain ``POST /v1/match`` answered by the connection protocol
(``http_protocol``) itself, without ASGI.

``hot_request`` says whether a request whose head was just read qualifies: ``POST /v1/match``
on HTTP/1.1 with one ``Content-Length`` within the endpoint's limit, no ``Expect``, no
``Transfer-Encoding``, no upgrade, a head within ``MAX_HEAD_BYTES``, and, where the server asks
for bearer tokens, a known one (one more header compared, one hash; a refused request is left
to the app, ``http_auth.GuardedApp``, which answers and counts the refusal). The connection
adds its own conditions (nothing before it still being answered, the client reading its
replies). ``hot_reply`` answers it once its body is complete with the bytes of
``MatchEndpoint.respond`` (the ``Accept`` header through ``http_app.wants_packed``): the same
bytes as the ASGI path, which the protocol sends in one write and counts in the endpoint's
metrics. The answer is computed without awaiting anything either way, so only the per-request
overhead of ASGI (a task, a scope, messages) goes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Final

import httptools

from swa_es.service.http_app import (
    JSON_TYPE,
    MAX_HEAD_BYTES,
    MatchEndpoint,
    error_body,
    head_bytes,
    wants_packed,
)
from swa_es.service.http_auth import ACCEPTED, BearerTokens
from swa_es.service.http_cycle import response_bytes

logger = logging.getLogger(__name__)

MATCH_PATH: Final = b"/v1/match"


@dataclass(slots=True)
class HotRequest:
    """A ``POST /v1/match`` the protocol answers itself, while its body arrives."""

    content_type: str | None
    query_string: bytes
    keep_alive: bool
    packed: bool
    """Whether the client asked for the binary reply (``http_app.wants_packed``)."""
    parts: list[bytes]
    """The body as it arrived."""
    started: float
    """``time.perf_counter()`` when its head was read."""


def hot_request(
    parser: httptools.HttpRequestParser,
    url: bytes,
    headers: list[tuple[bytes, bytes]],
    endpoint: MatchEndpoint,
    tokens: BearerTokens | None,
) -> HotRequest | None:
    """The HTTP/1.1 request whose head ``parser`` just read (its target ``url``, its
    ``headers`` with lower-case names) as one the protocol answers itself, or None for the ASGI
    path."""
    if parser.get_method() != b"POST" or parser.should_upgrade():
        return None
    path, _, query_string = url.partition(b"?")
    if path != MATCH_PATH:
        return None
    content_type: str | None = None
    length: bytes | None = None
    authorization: bytes | None = None
    accept: bytes | None = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None:
                return None
            length = value
        elif name == b"content-type":
            content_type = value.decode("latin-1")
        elif name == b"authorization":
            if authorization is not None:
                return None
            authorization = value
        elif name == b"accept":
            accept = value
        elif name == b"transfer-encoding" or name == b"expect":
            return None
    if length is None or not length.isdigit() or int(length) > endpoint.limit_bytes:
        return None
    if head_bytes(len(path) + len(query_string), headers) > MAX_HEAD_BYTES:
        return None
    if tokens is not None and tokens.verdict(authorization) != ACCEPTED:
        return None  # refused through ASGI (http_auth.GuardedApp), counted there
    keep_alive = parser.should_keep_alive()
    packed = wants_packed(accept)
    return HotRequest(content_type, query_string, keep_alive, packed, [], time.perf_counter())


def hot_reply(
    endpoint: MatchEndpoint, request: HotRequest, date_line: bytes, *, keep_alive: bool
) -> tuple[int, bytes, bool]:
    """The answer to ``request`` once its body is complete: its status, the whole response's
    bytes, and whether the connection stays open (``keep_alive``, unless the answer failed:
    a JSON 500 that closes it)."""
    try:
        parts = request.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        status, reply, media = endpoint.respond(
            request.content_type, body, request.query_string, request.packed
        )
    except Exception:
        logger.exception("POST /v1/match failed")
        status, reply, media, keep_alive = 500, error_body("internal error"), JSON_TYPE, False
    data = response_bytes(status, media, reply, close=not keep_alive, headers=(date_line,))
    return status, data, keep_alive
