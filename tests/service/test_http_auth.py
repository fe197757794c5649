"""Bearer tokens and TLS on the HTTP server, over real sockets with real certificates and keys
made here (trustme): a request without a token is refused 401, an unknown token 403 (both
counted), a known one served (on the hot route by the protocol itself); a token file rewritten
takes effect without a restart; TLS with the CA works, plain HTTP to it fails, a required client
certificate is enforced; ``/healthz`` stays open; a non-loopback bind without protection is
refused before it binds.

The blocking ``RoutingClient`` runs in a worker thread (the server shares the test's loop).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
import trustme
from starlette.types import Receive, Scope, Send

from swa_es.client import AsyncRoutingClient, RoutingAuthError, RoutingClient
from swa_es.client.clients import RoutingConnectionError
from swa_es.options.values import SettingError
from swa_es.service.http_app import AppParts, ServiceApp, build_app
from swa_es.service.http_auth import (
    ACCEPTED,
    FORBIDDEN,
    UNAUTHENTICATED,
    BearerTokens,
    HttpSecurity,
    is_loopback,
    server_tls_context,
)
from swa_es.service.http_server import HttpServer, start_http_server
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.testing.metrics import parse_samples, refusals_by_reason
from tests.service.test_service_metrics import _followed

T = TypeVar("T")
TOKEN = "router-a.Zm9vYmFyYmF6cXV4"
OTHER = "router-b.cXV4YmF6YmFyZm9v"
PROMPT = list(range(1, 33))
GUARD_S = 10.0
"""Bound on waiting for a rewritten token file to take effect (it is looked at every 0.05 s
here)."""


@dataclass(frozen=True)
class Pki:
    """A CA and, signed by it, the server's certificate (127.0.0.1, localhost) and a client's,
    as PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates and keys made for this module."""
    where = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("router-a@example.com")
    paths = Pki(*(where / name for name in ("ca", "sc", "sk", "cc", "ck", "oca")))
    ca.cert_pem.write_to_path(str(paths.ca))
    server.cert_chain_pems[0].write_to_path(str(paths.server_cert))
    server.private_key_pem.write_to_path(str(paths.server_key))
    client.cert_chain_pems[0].write_to_path(str(paths.client_cert))
    client.private_key_pem.write_to_path(str(paths.client_key))
    stranger.cert_pem.write_to_path(str(paths.other_ca))
    return paths


def _token_file(path: Path, *tokens: str) -> Path:
    """Write ``tokens`` (with a comment and a blank line) to ``path`` the way an operator
    rotates them: a new file renamed over the old one."""
    scratch = path.with_suffix(".new")
    scratch.write_text("# routers allowed\n\n" + "".join(f"{t}\n" for t in tokens))
    os.chmod(scratch, 0o600)
    scratch.replace(path)
    return path


class _CountingApp(ServiceApp):
    """The service's app, counting the requests that reach it through ASGI."""

    calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            type(self).calls += 1
        await super().__call__(scope, receive, send)


async def _parts() -> AppParts:
    follower, views = await _followed()
    return AppParts(
        registry_of(list),
        lambda: (True, "ok"),
        FollowerRouting(follower, views),
        readiness=lambda: (True, {"ready": True}),
    )


@asynccontextmanager
async def _server(security: HttpSecurity, *, counting: bool = False) -> AsyncIterator[HttpServer]:
    app = build_app(await _parts())
    if counting:
        assert isinstance(app, ServiceApp)
        _CountingApp.calls = 0
        app = _CountingApp(app._framework, app.match_endpoint, app.metrics)
    async with HttpServer(app, security=security) as server:
        yield server


async def _in_thread(call: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(call)


def _match(url: str, **client: Any) -> int:
    """Match ``PROMPT`` through a ``RoutingClient``: the sources that answered."""
    with RoutingClient(url, timeout_s=GUARD_S, **client) as routing:
        return len(routing.match(PROMPT).answer.sources)


def _refusal(url: str, **client: Any) -> int:
    """The status of a ``RoutingClient`` match that the server refuses."""
    with pytest.raises(RoutingAuthError) as refused:
        _match(url, **client)
    return refused.value.status


async def _refusals(url: str, token: str, **client: Any) -> dict[str, float]:
    async with httpx.AsyncClient(**client) as http:
        reply = await http.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200, reply.text
    return refusals_by_reason(parse_samples(reply.text))


# --- tokens -----------------------------------------------------------------------------------


async def test_only_a_named_token_is_served_and_refusals_are_counted(tmp_path: Path) -> None:
    """No token: 401 with ``WWW-Authenticate: Bearer``; an unknown one: 403; the named one is
    served, on the hot route by the protocol itself (nothing reaches the app through ASGI);
    every route but the health check is guarded; each refusal counted by reason."""
    tokens = BearerTokens(path=_token_file(tmp_path / "tokens", TOKEN))
    async with _server(HttpSecurity(tokens), counting=True) as server:
        assert await _in_thread(partial(_match, server.url, token=TOKEN)) == 1
        assert _CountingApp.calls == 0  # answered by the protocol, token checked there
        assert await _in_thread(partial(_refusal, server.url)) == 401
        assert await _in_thread(partial(_refusal, server.url, token=OTHER)) == 403
        async with httpx.AsyncClient(base_url=server.url) as http:
            for path in ("/v1/sources", "/metrics", "/v1/ui/state", "/v1/quality", "/v1/x"):
                bare = await http.get(path)
                assert bare.status_code == 401, path
                assert bare.headers["www-authenticate"].startswith("Bearer"), path
                wrong = await http.get(path, headers={"Authorization": f"Bearer {OTHER}"})
                assert wrong.status_code == 403, path
                basic = await http.get(path, headers={"Authorization": "Basic dXNlcjpwYXNz"})
                assert basic.status_code == 401, path
            named = await http.get("/v1/sources", headers={"Authorization": f"Bearer {TOKEN}"})
            assert named.status_code == 200 and "w0" in named.json()["sources"]
            health = await http.get("/healthz")
            assert (health.status_code, health.text) == (200, "ok\n")
            assert (await http.get("/readyz")).status_code == 200
            page = await http.get("/ui", follow_redirects=True)  # static, not its data
            assert page.status_code == 200 and page.url.path.startswith("/ui")
            assert _CountingApp.calls == 3 + len(page.history) + 1  # none refused
        refusals = await _refusals(server.url, TOKEN)
    assert refusals == {"unauthenticated": 1 + 5 * 2, "forbidden": 1 + 5}


async def test_the_async_client_sends_its_token(tmp_path: Path) -> None:
    """``AsyncRoutingClient(token=...)`` is served; without the token it is refused 401."""
    tokens = BearerTokens([TOKEN])
    async with _server(HttpSecurity(tokens)) as server:
        async with AsyncRoutingClient(server.url, token=TOKEN) as routing:
            assert set((await routing.match(PROMPT)).answer.sources) == {"w0"}
            assert "w0" in await routing.sources()
        async with AsyncRoutingClient(server.url) as routing:
            with pytest.raises(RoutingAuthError) as refused:
                await routing.match(PROMPT)
    assert refused.value.status == 401


async def test_a_rewritten_token_file_takes_effect_without_a_restart(tmp_path: Path) -> None:
    """The file rewritten with a new token: within its check period the new token is served and
    the old one refused, on the same server."""
    path = _token_file(tmp_path / "tokens", TOKEN)
    tokens = BearerTokens(path=path, check_every_s=0.05)
    async with _server(HttpSecurity(tokens)) as server:
        assert await _in_thread(partial(_match, server.url, token=TOKEN)) == 1
        _token_file(path, OTHER)
        with anyio.fail_after(GUARD_S):
            while tokens.verdict(f"Bearer {OTHER}".encode()) != ACCEPTED:  # noqa: ASYNC110
                await anyio.sleep(0.05)  # the file is looked at on a request: nothing to await
        assert await _in_thread(partial(_match, server.url, token=OTHER)) == 1
        assert await _in_thread(partial(_refusal, server.url, token=TOKEN)) == 403


def test_the_token_file_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    """Looked at once per check period at most; a file gone serves none of its tokens (tokens
    given directly still work) until it is back."""
    now = [0.0]
    path = _token_file(tmp_path / "tokens", TOKEN)
    tokens = BearerTokens([OTHER], path, check_every_s=1.0, clock=lambda: now[0])
    assert tokens.count == 2
    path.unlink()
    assert tokens.verdict(f"Bearer {TOKEN}".encode()) == ACCEPTED  # not looked at yet
    now[0] = 1.0
    assert tokens.verdict(f"Bearer {TOKEN}".encode()) == FORBIDDEN
    assert tokens.verdict(f"Bearer {OTHER}".encode()) == ACCEPTED
    _token_file(path, TOKEN)
    now[0] = 2.0
    assert tokens.verdict(f"Bearer {TOKEN}".encode()) == ACCEPTED
    assert tokens.verdict(None) == UNAUTHENTICATED
    assert tokens.verdict(b"Bearer") == UNAUTHENTICATED
    assert tokens.verdict(TOKEN.encode()) == UNAUTHENTICATED  # no scheme


def test_a_bad_token_file_is_refused_naming_it_and_never_showing_a_token(tmp_path: Path) -> None:
    """A missing file, a line that is no token (named by number, not shown) and a file without
    any token are each an error naming the flag and the file."""
    with pytest.raises(SettingError, match=r"--http-token-file .*missing"):
        BearerTokens(path=tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text(f"{TOKEN}\nsecret with spaces\n")
    with pytest.raises(SettingError, match="line 2 is no bearer token") as refused:
        BearerTokens(path=bad)
    assert "secret" not in str(refused.value)
    empty = tmp_path / "empty"
    empty.write_text("# nobody yet\n\n")
    with pytest.raises(SettingError, match="holds no token"):
        BearerTokens(path=empty)
    with pytest.raises(SettingError, match="SWA_ES_HTTP_TOKEN: line 1"):
        BearerTokens(["a\r\nx: y"])


# --- TLS --------------------------------------------------------------------------------------


async def test_tls_with_the_ca_works_and_plain_http_to_it_fails(pki: Pki) -> None:
    """A TLS server with a token: the client trusting the CA is served over https; plain HTTP
    to the same port gets no answer; a client trusting another CA refuses the server."""
    tls = server_tls_context(pki.server_cert, pki.server_key)
    async with _server(HttpSecurity(BearerTokens([TOKEN]), tls)) as server:
        assert server.url.startswith("https://127.0.0.1:")
        assert await _in_thread(partial(_match, server.url, token=TOKEN, ca_file=pki.ca)) == 1
        plain = server.url.replace("https://", "http://")
        with pytest.raises(RoutingConnectionError):
            await _in_thread(partial(_match, plain, token=TOKEN))
        with pytest.raises(RoutingConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await _in_thread(partial(_match, server.url, token=TOKEN, ca_file=pki.other_ca))
        async with AsyncRoutingClient(server.url, token=TOKEN, ca_file=pki.ca) as routing:
            assert set((await routing.match(PROMPT)).answer.sources) == {"w0"}
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=pki.ca)) as http:
            assert (await http.get(f"{server.url}/healthz")).status_code == 200


async def test_a_required_client_certificate_is_enforced(pki: Pki) -> None:
    """With a client CA the server serves only a client presenting a certificate it signed."""
    tls = server_tls_context(pki.server_cert, pki.server_key, pki.ca)
    async with _server(HttpSecurity(tls=tls)) as server:
        certified = {
            "ca_file": pki.ca,
            "client_cert": pki.client_cert,
            "client_key": pki.client_key,
        }
        assert await _in_thread(partial(_match, server.url, **certified)) == 1
        with pytest.raises(RoutingConnectionError):
            await _in_thread(partial(_match, server.url, ca_file=pki.ca))


def test_tls_files_that_cannot_be_served_name_their_flag(pki: Pki, tmp_path: Path) -> None:
    """A missing key, a key that is not the certificate's, a CA file that is no CA: each an
    error naming the flag."""
    with pytest.raises(SettingError, match=r"--http-tls-key .*nokey"):
        server_tls_context(pki.server_cert, tmp_path / "nokey")
    with pytest.raises(SettingError, match=r"--http-tls-cert .*cannot be served"):
        server_tls_context(pki.server_cert, pki.client_key)
    with pytest.raises(SettingError, match="--http-tls-client-ca"):
        server_tls_context(pki.server_cert, pki.server_key, pki.server_key)


# --- exposure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.7", False), ("router.example", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    """Only 127.0.0.0/8, ::1 and localhost count as this machine alone."""
    assert is_loopback(host) is loopback


async def test_a_public_bind_without_protection_is_refused_before_binding(pki: Pki) -> None:
    """0.0.0.0 without a token and TLS: an error naming the host flag and the flags that
    protect it (nothing bound); with ``insecure`` a warning; with a token and TLS, or TLS with
    client certificates, served."""
    tls = server_tls_context(pki.server_cert, pki.server_key)
    mutual = server_tls_context(pki.server_cert, pki.server_key, pki.ca)
    parts = await _parts()
    for security in (HttpSecurity(), HttpSecurity(BearerTokens([TOKEN])), HttpSecurity(tls=tls)):
        async with AsyncExitStack() as stack:
            with pytest.raises(SettingError) as refused:
                await start_http_server(
                    stack, parts, host="0.0.0.0", port=0, host_flag="--http-host", security=security
                )
        message = str(refused.value)
        assert message.startswith("--http-host 0.0.0.0: serves other machines"), message
        assert "--http-insecure" in message
        assert ("--http-token-file" in message) is (security.tokens is None)
        assert ("--http-tls-cert" in message) is (security.tls is None)
    warning = HttpSecurity(insecure=True).exposure("0.0.0.0", "--metrics-host")
    assert warning is not None and "--http-insecure" in warning
    assert HttpSecurity(BearerTokens([TOKEN]), tls).exposure("0.0.0.0", "--http-host") is None
    assert HttpSecurity(tls=mutual).exposure("::", "--http-host") is None
    assert HttpSecurity().exposure("127.0.0.1", "--http-host") is None
