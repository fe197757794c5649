"""The HTTP server of ``serve``, ``follow`` and ``bridge``: uvicorn serving the app of
``http_app`` with the protocol of ``http_protocol``, in our task group.

``HttpServer`` is an async context manager owning the uvicorn server task; it binds before it
returns (``port=0`` picks a free port, read back from ``port``). ``start_http_server`` is how a
command serves its ``AppParts`` for as long as its exit stack lives; an address it cannot
listen on is a ``ListenError`` naming the command's flag and value.

Security (``http_auth.HttpSecurity``): with bearer tokens the app is served behind
``GuardedApp`` (and the hot route checks the token itself); with a TLS context the listener
speaks TLS only (``url`` is then ``https://``). ``start_http_server`` refuses, before binding, a
host other than the loopback without TLS and an authentication unless ``insecure`` is set
(then it logs a warning).
"""

from __future__ import annotations

import errno
import logging
import socket
from contextlib import AsyncExitStack, nullcontext
from types import TracebackType
from typing import Any, Self

import anyio
import uvicorn
from anyio.abc import TaskGroup
from starlette.types import ASGIApp

from swa_es.service.errors import ListenError
from swa_es.service.http_app import AppParts, MatchEndpoint, ServiceApp, build_app
from swa_es.service.http_auth import GuardedApp, HttpSecurity
from swa_es.service.http_protocol import HttpLimits, protocol_class

logger = logging.getLogger(__name__)


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its host (the CLI cancels the task group)."""

    def capture_signals(self) -> Any:  # a context manager in uvicorn
        return nullcontext()


def bind_listener(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port) for uvicorn to serve.

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
        self._server: _QuietServer | None = None
        self._group: TaskGroup | None = None

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
        app = self._app if tokens is None else GuardedApp(self._app, tokens, metrics)
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            http=protocol_class(self._hot_match(), metrics, self._limits, tokens),
            ws="none",
            timeout_keep_alive=self._limits.keep_alive_timeout_s,  # type: ignore[arg-type]
            timeout_graceful_shutdown=2,
            ssl_context_factory=None if tls is None else (lambda _config, _default: tls),
        )
        server = _QuietServer(config)
        self._server = server
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 -- uvicorn exposes a flag, not an event
                await anyio.sleep(0.01)
        logger.info("http on %s", self.url)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._group is not None and self._server is not None
        self._server.should_exit = True
        group, self._group = self._group, None
        await group.__aexit__(None, None, None)


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
