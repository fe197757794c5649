"""``RoutingClient`` (blocking) and ``AsyncRoutingClient`` for a follower's routing API.

The blocking client speaks HTTP/1.1 over one keep-alive connection of its own
(``connection.HttpConnection``: one send per request, replies parsed by httptools): on the
loopback it costs a fraction of what ``http.client`` or a general HTTP library costs per request
(``bench/http_bench.py`` measures them side by side), and a router calls it once per request. It
is not thread-safe: give each thread its own. The async client uses ``httpx`` with a pool of
keep-alive connections and may be shared by many tasks.

Both send one prompt as a binary body (little-endian u32 token ids, or i64 block hashes), asking
for the binary answer (``packed_answers``), and a batch as msgpack; both retry a request once
when a kept-alive connection turns out to be closed (matching is read-only, so a retry is safe;
a feedback body is retried only when the server had closed the connection before the request,
so it is never counted twice). ``feedback`` reports routed requests back
(``swa_es.client.feedback``). Both send a bearer token when given one and speak TLS to an
``https://`` URL (a CA file, or a context; a client certificate for mutual TLS).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import urlsplit

from cache.errors import SwaEsError
from swa_es.client.answers import (
    BatchReply,
    MatchAnswer,
    MatchReply,
    parse_sources,
)
from swa_es.client.connection import (
    BadReplyError,
    ConnectionClosedError,
    HttpConnection,
    bearer_value,
    tls_context,
)
from swa_es.client.feedback import QUALITY_PATH, Feedback, FeedbackReceipt, feedback_request
from swa_es.client.packed_answers import PACKED_ANSWERS, AnswersReader, PackedAnswersError
from swa_es.client.wire import (
    AsOfReader,
    HashedPrompt,
    Prompt,
    Request,
    batch_request,
    hashes_request,
    loads,
    match_request,
)

DEFAULT_TIMEOUT_S: Final = 5.0

_Body = tuple[bytes, str | None]
"""A reply's body and its ``Content-Type``."""


class RoutingError(SwaEsError):
    """The routing API refused a request: ``status`` and the server's ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class RoutingUnavailableError(RoutingError):
    """The follower cannot answer yet (503: restoring)."""

    retriable = True


class RoutingAuthError(RoutingError):
    """The routing API refused the client's credentials: 401, no bearer token sent (give
    ``token=``), or 403, a token it does not know."""


class RoutingConnectionError(SwaEsError):
    """The routing API could not be reached, or the connection failed mid-request."""

    retriable = True


def _refusal(status: int, body: bytes) -> RoutingError:
    try:
        message = str(loads(body)["error"])
    except Exception:
        message = body[:200].decode("utf-8", "replace")
    kind = _REFUSALS.get(status, RoutingError)
    return kind(status, message)


_REFUSALS: Final[dict[int, type[RoutingError]]] = {
    401: RoutingAuthError,
    403: RoutingAuthError,
    503: RoutingUnavailableError,
}


@dataclass(frozen=True, slots=True)
class _Server:
    """Where a client connects and how: host, port, TLS context (None: plain HTTP)."""

    host: str
    port: int
    tls: ssl.SSLContext | None

    @property
    def base_url(self) -> str:
        scheme = "http" if self.tls is None else "https"
        name = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{name}:{self.port}"


def _server(
    base_url: str,
    ssl_context: ssl.SSLContext | None,
    ca_file: str | Path | None,
    client_cert: str | Path | None,
    client_key: str | Path | None,
) -> _Server:
    """``base_url`` (``http://`` or ``https://``) with its TLS context: ``ssl_context``, or one
    made from ``ca_file`` and the client certificate (``ValueError`` for TLS options given to
    an ``http://`` URL, or both a context and files)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be http(s)://host[:port], got {base_url!r}")
    if parts.path not in ("", "/"):
        raise ValueError(f"base_url must have no path, got {base_url!r}")
    files = (ca_file, client_cert, client_key)
    if parts.scheme == "http":
        if ssl_context is not None or any(f is not None for f in files):
            raise ValueError(f"TLS options need an https:// base_url, got {base_url!r}")
        return _Server(parts.hostname, parts.port or 80, None)
    if ssl_context is not None and any(f is not None for f in files):
        raise ValueError("give ssl_context or ca_file/client_cert/client_key, not both")
    tls = ssl_context if ssl_context is not None else tls_context(*files)
    return _Server(parts.hostname, parts.port or 443, tls)


class _Replies:
    """Turns reply bodies into typed answers (shared by both clients)."""

    def __init__(self) -> None:
        self._as_of = AsOfReader()
        self._packed = AnswersReader()

    def match(self, body: bytes, content_type: str | None) -> MatchReply:
        if content_type == PACKED_ANSWERS:
            try:
                sources, as_of = self._packed.read(body)
            except PackedAnswersError as exc:
                raise BadReplyError(str(exc)) from None
            return MatchReply(MatchAnswer(sources), self._as_of(as_of))
        raw = loads(body)
        return MatchReply(MatchAnswer(parse_sources(raw["sources"])), self._as_of(raw["as_of"]))

    def batch(self, body: bytes) -> BatchReply:
        raw = loads(body)
        answers = [MatchAnswer(parse_sources(answer["sources"])) for answer in raw["answers"]]
        return BatchReply(answers, self._as_of(raw["as_of"]))


class RoutingClient:
    """A blocking client of ``/v1/match`` and ``/v1/sources`` over one keep-alive connection.

    ``timeout_s`` bounds connecting and each wait for the server. ``token``: the bearer token
    sent with every request (a server started with ``--http-token-file`` asks for one). An
    ``https://`` ``base_url`` speaks TLS: the server's certificate checked against ``ca_file``
    (None: the system's CAs), ``client_cert``/``client_key`` presented for mutual TLS, or all
    of it from ``ssl_context``. Use as a context manager or call ``close``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        token: str | None = None,
        ca_file: str | Path | None = None,
        client_cert: str | Path | None = None,
        client_key: str | Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        server = _server(base_url, ssl_context, ca_file, client_cert, client_key)
        self._host, self._port = server.host, server.port
        self._connection = HttpConnection(
            self._host, self._port, timeout_s=timeout_s, tls=server.tls, token=token
        )
        self._replies = _Replies()

    def match(self, token_ids: Sequence[int] | bytes, extra_key: str | None = None) -> MatchReply:
        """Per source, what it holds of the prompt ``token_ids`` (a sequence of ints, or
        little-endian u32 bytes) in namespace ``extra_key``."""
        return self._replies.match(*self._post(match_request(token_ids, extra_key)))

    def match_hashes(self, block_hashes: Sequence[int], page_size: int) -> MatchReply:
        """``match`` for a prompt given as the chained block hashes of its pages."""
        return self._replies.match(*self._post(hashes_request(block_hashes, page_size)))

    def match_batch(self, prompts: Sequence[Prompt | HashedPrompt]) -> BatchReply:
        """The answers to several prompts in one request, in order."""
        return self._replies.batch(self._post(batch_request(prompts))[0])

    def sources(self) -> dict[str, Any]:
        """``GET /v1/sources``: per source its epoch, seq, blocks, digest and state."""
        return dict(loads(self._exchange("GET", "/v1/sources", None, None)[0])["sources"])

    def feedback(self, reports: Sequence[Feedback]) -> FeedbackReceipt:
        """``POST /v1/feedback``: report routed requests (the source chosen, the tokens its
        engine reused, what the index predicted) in one binary body."""
        return FeedbackReceipt.parse(loads(self._post(feedback_request(reports))[0]))

    def quality(self) -> dict[str, Any]:
        """``GET /v1/quality``: prediction quality per chosen source and over all."""
        return dict(loads(self._exchange("GET", QUALITY_PATH, None, None)[0]))

    def close(self) -> None:
        """Close the connection (a later request opens a new one)."""
        self._connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _post(self, request: Request) -> _Body:
        return self._exchange(
            "POST", request.target, request.content_type, request.body, request.accept
        )

    def _exchange(
        self,
        method: str,
        target: str,
        content_type: str | None,
        body: bytes | None,
        accept: str | None = None,
    ) -> _Body:
        for attempt in (1, 2):
            reused = self._connection.is_open
            try:
                reply = self._connection.exchange(method, target, content_type, body, accept)
            except (ConnectionError, OSError) as exc:
                # a kept-alive connection the server had closed before replying: once more
                stale = not isinstance(exc, TimeoutError | BadReplyError) and not (
                    isinstance(exc, ConnectionClosedError) and exc.replied
                )
                if attempt == 1 and reused and stale:
                    continue
                raise RoutingConnectionError(
                    f"{method} http://{self._host}:{self._port}{target.split('?')[0]}: {exc!r}"
                ) from exc
            if reply.status != 200:
                raise _refusal(reply.status, reply.body)
            return reply.body, reply.content_type
        raise AssertionError("unreachable")


class AsyncRoutingClient:
    """An async client of ``/v1/match`` and ``/v1/sources`` (httpx, pooled keep-alive
    connections; safe to share between tasks).

    ``timeout_s`` bounds connecting and each wait for the server; ``max_connections`` the
    pool. ``token`` and TLS (``ca_file``, ``client_cert``, ``client_key``, ``ssl_context``) as
    ``RoutingClient``'s. Use as an async context manager or call ``aclose``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_connections: int = 16,
        token: str | None = None,
        ca_file: str | Path | None = None,
        client_cert: str | Path | None = None,
        client_key: str | Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        import httpx  # the async client's dependency (the swa-es[client] extra)

        server = _server(base_url, ssl_context, ca_file, client_cert, client_key)
        headers = {} if token is None else {"Authorization": bearer_value(token)}
        self._client = httpx.AsyncClient(
            base_url=server.base_url,
            headers=headers,
            verify=True if server.tls is None else server.tls,
            timeout=timeout_s,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )
        self._errors: tuple[type[Exception], ...] = (httpx.TransportError,)
        self._replies = _Replies()

    async def match(
        self, token_ids: Sequence[int] | bytes, extra_key: str | None = None
    ) -> MatchReply:
        """Per source, what it holds of the prompt ``token_ids`` in namespace ``extra_key``."""
        return self._replies.match(*await self._post(match_request(token_ids, extra_key)))

    async def match_hashes(self, block_hashes: Sequence[int], page_size: int) -> MatchReply:
        """``match`` for a prompt given as the chained block hashes of its pages."""
        return self._replies.match(*await self._post(hashes_request(block_hashes, page_size)))

    async def match_batch(self, prompts: Sequence[Prompt | HashedPrompt]) -> BatchReply:
        """The answers to several prompts in one request, in order."""
        return self._replies.batch((await self._post(batch_request(prompts)))[0])

    async def sources(self) -> dict[str, Any]:
        """``GET /v1/sources``: per source its epoch, seq, blocks, digest and state."""
        return dict(loads((await self._exchange("GET", "/v1/sources", None, {}))[0])["sources"])

    async def feedback(self, reports: Sequence[Feedback]) -> FeedbackReceipt:
        """``POST /v1/feedback``: report routed requests (the source chosen, the tokens its
        engine reused, what the index predicted) in one binary body."""
        return FeedbackReceipt.parse(loads((await self._post(feedback_request(reports)))[0]))

    async def quality(self) -> dict[str, Any]:
        """``GET /v1/quality``: prediction quality per chosen source and over all."""
        return dict(loads((await self._exchange("GET", QUALITY_PATH, None, {}))[0]))

    async def aclose(self) -> None:
        """Close every connection."""
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _post(self, request: Request) -> _Body:
        headers = {"Content-Type": request.content_type}
        if request.accept is not None:
            headers["Accept"] = request.accept
        return await self._exchange("POST", request.target, request.body, headers)

    async def _exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> _Body:
        try:
            response = await self._client.request(method, target, content=body, headers=headers)
        except self._errors as exc:
            raise RoutingConnectionError(f"{method} {target.split('?')[0]}: {exc!r}") from exc
        if response.status_code != 200:
            raise _refusal(response.status_code, response.content)
        return response.content, response.headers.get("content-type")
