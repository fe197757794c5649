"""The HTTP server of ``serve``, ``follow`` and ``bridge``: an asyncio server
(``loop.create_server`` on the socket of ``bind_listener``) whose connections are
``http_protocol.HttpConnection``, serving the app of ``http_app``.

``HttpServer`` is an async context manager owning the listener: it binds before it returns
(``port=0`` picks a free port, read back from ``port``), keeps the ``date`` header current, and
on exit stops gracefully: it stops accepting, closes idle connections, lets the answers in
progress finish for up to ``GRACE_S`` (each connection closing after its answer), then closes
whatever is left and cancels the app tasks still running. ``start_http_server`` is how a command
serves its ``AppParts`` for as long as its exit stack lives; an address it cannot listen on is a
``ListenError`` naming the command's flag and value.

Security (``http_auth.HttpSecurity``): with bearer tokens the app is served behind
``GuardedApp`` (and the hot route checks the token itself); with a TLS context the listener
speaks TLS only (``url`` is then ``https://``; a handshake must end within the head timeout).
``start_http_server`` refuses, before binding, a host other than the loopback without TLS and
an authentication unless ``insecure`` is set (then it logs a warning).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Final, Self

import anyio
from starlette.types import ASGIApp

from swa_es.service.errors import ListenError
from swa_es.service.http_app import AppParts, MatchEndpoint, ServiceApp, build_app
from swa_es.service.http_auth import GuardedApp, HttpSecurity
from swa_es.service.http_bounds import ServerState
from swa_es.service.http_cycle import date_line
from swa_es.service.http_limits import HttpLimits
from swa_es.service.http_protocol import HttpConnection

logger = logging.getLogger(__name__)

GRACE_S: Final = 2.0
"""How long a stopping server lets the answers in progress finish."""
_CANCEL_WAIT_S: Final = 1.0
"""How long a stopping server waits for the app tasks it cancelled."""


def bind_listener(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port) for the server to serve.

    The protocol is named (``IPPROTO_TCP``, not the default 0): asyncio turns on TCP_NODELAY
    only for connections accepted from a socket whose ``proto`` says TCP. Without it Nagle
    holds back the response body (headers and body are written separately) until the client's
    delayed ACK of the headers, about 40 ms later, on every request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves ``app`` on ``host:port`` until the context exits (an async context manager).

    ``hot_route`` (default on): the connection protocol itself answers a plain
    ``POST /v1/match`` of an app made by ``build_app``; off, every request goes through ASGI
    (the answers are the same bytes; the benchmark compares the two). ``limits``: the bounds
    on its connections (timeouts, how many at once; default ``HttpLimits()``). ``security``:
    the bearer tokens asked of every request but the open paths, and the TLS context of the
    listener (default: neither; ``HttpServer`` itself does not check the host against them,
    ``start_http_server`` does).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        hot_route: bool = True,
        limits: HttpLimits | None = None,
        security: HttpSecurity | None = None,
    ) -> None:
        self._app = app
        self._hot_route = hot_route
        self._limits = HttpLimits() if limits is None else limits
        self._security = HttpSecurity() if security is None else security
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._state: ServerState | None = None
        self._server: asyncio.Server | None = None
        self._clock: asyncio.TimerHandle | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._port is None:
            raise RuntimeError("HttpServer is not running")
        return self._port

    @property
    def host(self) -> str:
        """The address served."""
        return self._host

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the bound address (``https://`` with TLS)."""
        return http_url(self._host, self.port, tls=self._security.tls is not None)

    @property
    def security(self) -> HttpSecurity:
        """How it admits clients."""
        return self._security

    def _hot_match(self) -> MatchEndpoint | None:
        if self._hot_route and isinstance(self._app, ServiceApp):
            return self._app.match_endpoint
        return None

    async def __aenter__(self) -> Self:
        sock = bind_listener(self._host, self._requested_port)
        self._port = int(sock.getsockname()[1])
        metrics = self._app.metrics if isinstance(self._app, ServiceApp) else None
        tokens, tls = self._security.tokens, self._security.tls
        state = ServerState(
            self._app if tokens is None else GuardedApp(self._app, tokens, metrics),
            match=self._hot_match(),
            metrics=metrics,
            limits=self._limits,
            tokens=tokens,
            tls=tls is not None,
        )
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: HttpConnection(state),
                sock=sock,
                ssl=tls,
                ssl_handshake_timeout=None if tls is None else self._limits.head_timeout_s,
            )
        except BaseException:
            sock.close()
            raise
        self._state = state
        self._tick()
        logger.info("http on %s", self.url)
        return self

    def _tick(self) -> None:
        """Keep the ``date`` header current: refreshed as each second begins."""
        assert self._state is not None
        self._state.date_line = date_line()
        self._clock = asyncio.get_running_loop().call_later(1.0 - time.time() % 1.0, self._tick)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        state, server = self._state, self._server
        assert state is not None and server is not None
        self._state = self._server = None
        if self._clock is not None:
            self._clock.cancel()
        server.close()  # accept no more connections
        state.stopping = True
        with anyio.CancelScope(shield=True):
            for connection in list(state.connections):
                connection.shutdown()
            with anyio.move_on_after(GRACE_S):
                if state.connections:
                    await state.all_closed.wait()
                if state.tasks:  # done answering, maybe not yet returned
                    await asyncio.wait(set(state.tasks))
            for connection in list(state.connections):
                connection.abort()
            tasks = set(state.tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=_CANCEL_WAIT_S)
            with anyio.move_on_after(_CANCEL_WAIT_S):
                await server.wait_closed()


def http_url(host: str, port: int, *, tls: bool = False) -> str:
    """``http://HOST:PORT`` (``https://`` with ``tls``; an IPv6 host in brackets)."""
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


_HOST_ERRNOS = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT})


async def start_http_server(
    stack: AsyncExitStack,
    parts: AppParts,
    *,
    host: str,
    port: int | None,
    host_flag: str = "--metrics-host",
    port_flag: str = "--metrics-port",
    security: HttpSecurity | None = None,
    limits: HttpLimits | None = None,
) -> HttpServer | None:
    """Serve ``parts`` until ``stack`` closes; the running server (None: ``port`` None, off).

    Under ``security`` (default: none) and ``limits`` (default: ``HttpLimits()``). A host other
    than the loopback without TLS and an authentication is a ``SettingError`` naming
    ``host_flag`` and the flags that would protect it, unless ``security.insecure`` (then a
    warning is logged). An address it cannot listen on is a ``ListenError`` naming the flag at
    fault and its value (``host_flag`` for a host that is no local address, else
    ``port_flag``)."""
    if port is None:
        return None
    security = HttpSecurity() if security is None else security
    warning = security.exposure(host, host_flag)
    if warning is not None:
        logger.warning("%s", warning)
    server = HttpServer(build_app(parts), host=host, port=port, security=security, limits=limits)
    try:
        return await stack.enter_async_context(server)
    except OSError as exc:
        address = f"{host}:{port}"
        reason = (exc.strerror or str(exc)).lower()
        if isinstance(exc, socket.gaierror) or exc.errno in _HOST_ERRNOS:
            raise ListenError(f"{host_flag} {host}", reason, address) from exc
        raise ListenError(f"{port_flag} {port}", reason, address) from exc
