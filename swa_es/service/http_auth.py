"""Who may use a service's HTTP server: bearer tokens, TLS, and the rule that keeps a server
reachable from other machines from running unprotected by accident.

- ``BearerTokens``: the tokens a request may present as ``Authorization: Bearer TOKEN``, given
  directly (``SWA_ES_HTTP_TOKEN``) and/or read from a file (one per line, blank lines and ``#``
  comments ignored) that is read again when it changes (its size, mtime or inode; looked at
  once a second at most), so tokens rotate without a restart. A presented token is hashed
  (SHA-256) and compared with every known token's hash by ``hmac.compare_digest``, all of them
  every time: the time taken says neither which token matched nor how much of one did.
- ``GuardedApp``: the ASGI app behind the check. A request without a usable ``Authorization``
  header (none, another scheme, two of them) is answered 401 (``unauthenticated``); one with a
  well-formed bearer token that is not known is answered 403 (``forbidden``); both carry
  ``WWW-Authenticate: Bearer`` and close the connection, and both are counted as refusals by
  those reasons. ``OPEN_PATHS`` (``/healthz``, ``/readyz``) and the static pages under ``/ui``
  are served to anyone. The hot route (``POST /v1/match``, answered by the connection protocol
  itself) makes the same check there and leaves a refused request to this app.
- ``server_tls_context``: the TLS context of a certificate and key, and optionally a CA whose
  client certificates are then required (mutual TLS).
- ``HttpSecurity``: the three together, and ``exposure``: a server bound to an address other
  than the loopback (127.0.0.0/8, ::1, ``localhost``) needs TLS and an authentication (bearer
  tokens or client certificates), unless told ``insecure``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import orjson

from swa_es.options.values import SettingError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from swa_es.service.http_metrics import HttpMetrics

logger = logging.getLogger(__name__)

ACCEPTED: Final = 0
"""``BearerTokens.verdict``: the request carries a known token."""
UNAUTHENTICATED: Final = 401
"""``BearerTokens.verdict``: no usable ``Authorization: Bearer`` header."""
FORBIDDEN: Final = 403
"""``BearerTokens.verdict``: a well-formed bearer token that is not known."""
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
"""Paths served without a token (what a load balancer or an orchestrator probes)."""
OPEN_PREFIX: Final = "/ui"
"""The static pages (``/ui``, ``/ui/...``) are served without a token; the data they fetch
(``/v1/...``) is not."""
TOKEN_CHECK_EVERY_S: Final = 1.0
"""How often, at most, the token file is looked at for a change."""
TOKEN_FILE_FLAG: Final = "--http-token-file"
TOKEN_VARIABLE: Final = "SWA_ES_HTTP_TOKEN"
INSECURE_FLAG: Final = "--http-insecure"
REALM: Final = b'Bearer realm="swa-es"'
_TOKEN68: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""A bearer token's characters (RFC 6750's ``b64token``)."""
_BEARER: Final = b"bearer"


def is_open_path(path: str) -> bool:
    """Whether ``path`` is served without a token."""
    return path in OPEN_PATHS or path == OPEN_PREFIX or path.startswith(OPEN_PREFIX + "/")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, ``localhost``;
    any other name counts as reachable from elsewhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def _parse_tokens(lines: Iterable[str], where: str) -> list[str]:
    """The tokens of ``lines`` (blank lines and ``#`` comments skipped); a line that is no
    bearer token is a ``SettingError`` naming ``where`` and the line's number, never its text."""
    tokens = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if _TOKEN68.fullmatch(text) is None:
            raise SettingError(
                where,
                f"line {number} is no bearer token (letters, digits and -._~+/, then = "
                "padding; one token a line)",
            )
        tokens.append(text)
    return tokens


@dataclass(frozen=True, slots=True)
class _FileState:
    """What says a token file changed: inode, size and modification time."""

    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> _FileState:
        status = path.stat()
        return cls(status.st_ino, status.st_size, status.st_mtime_ns)


class BearerTokens:
    """The bearer tokens a server accepts: ``tokens`` given directly (from ``tokens_from``, for
    errors) and those of the file ``path``, read again when it changes.

    At construction a token file that cannot be read, holds a line that is no token, or a
    server left without any token is a ``SettingError`` naming the flag or variable at fault.
    Later, a file that has gone or turned unreadable serves no token of its own (the refusals
    say so; a warning is logged) until it is readable again: write a new file beside it and
    rename it over the old one.
    """

    def __init__(
        self,
        tokens: Sequence[str] = (),
        path: Path | None = None,
        *,
        tokens_from: str = TOKEN_VARIABLE,
        path_flag: str = TOKEN_FILE_FLAG,
        check_every_s: float = TOKEN_CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._given = [_digest(t.encode("ascii")) for t in _parse_tokens(tokens, tokens_from)]
        self._path = path
        self._where = f"{path_flag} {path}"
        self._check_every_s = check_every_s
        self._clock = clock
        self._next_check = clock() + check_every_s
        self._state: _FileState | None = None
        self._from_file: list[bytes] = []
        if path is not None:
            try:
                self._state = _FileState.of(path)
                self._from_file = self._read(path)
            except OSError as exc:
                raise SettingError(self._where, exc.strerror or str(exc)) from None
            if path.stat().st_mode & 0o007:
                logger.warning("%s: readable by every user of this machine", self._where)
        self._digests = self._given + self._from_file
        if not self._digests:
            where = self._where if path is not None else tokens_from
            raise SettingError(where, "holds no token: every request would be refused")

    def _read(self, path: Path) -> list[bytes]:
        text = path.read_text(encoding="ascii", errors="replace")
        return [_digest(t.encode("ascii")) for t in _parse_tokens(text.splitlines(), self._where)]

    @property
    def count(self) -> int:
        """How many tokens are accepted now."""
        return len(self._digests)

    @property
    def path(self) -> Path | None:
        """The token file (None: tokens given directly only)."""
        return self._path

    def verdict(self, authorization: bytes | None) -> int:
        """``ACCEPTED``, ``UNAUTHENTICATED`` or ``FORBIDDEN`` for a request whose
        ``Authorization`` header is ``authorization`` (None: it has none)."""
        if authorization is None:
            return UNAUTHENTICATED
        scheme, _, credentials = authorization.partition(b" ")
        credentials = credentials.strip(b" \t")
        if scheme.lower() != _BEARER or not credentials:
            return UNAUTHENTICATED
        if self._path is not None and self._clock() >= self._next_check:
            self._refresh()
        presented = _digest(credentials)
        matched = False
        for known in self._digests:  # every one, whichever matches
            matched |= hmac.compare_digest(presented, known)
        return ACCEPTED if matched else FORBIDDEN

    def _refresh(self) -> None:
        """Read the token file again if it changed since it was read."""
        assert self._path is not None
        self._next_check = self._clock() + self._check_every_s
        try:
            state = _FileState.of(self._path)
            if state == self._state:
                return
            self._state = state
            self._from_file = self._read(self._path)
        except (OSError, SettingError) as exc:
            reason = exc.reason if isinstance(exc, SettingError) else exc.strerror or str(exc)
            if self._state is not None or self._from_file:
                logger.warning("%s: %s; its tokens are refused until fixed", self._where, reason)
            self._state = None
            self._from_file = []
        else:
            logger.info("%s: read again, %d tokens", self._where, len(self._from_file))
        self._digests = self._given + self._from_file


def authorization_of(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The ``Authorization`` header among ``headers`` (lower-cased names, as ASGI and the
    parser give them); None without one, ``b""`` (no credentials) for more than one."""
    found: bytes | None = None
    for name, value in headers:
        if name == b"authorization":
            if found is not None:
                return b""
            found = value
    return found


_REFUSALS: Final = {
    UNAUTHENTICATED: b"missing bearer token: send Authorization: Bearer TOKEN",
    FORBIDDEN: b"unknown bearer token",
}


def refusal_headers(verdict: int) -> list[tuple[bytes, bytes]]:
    """The headers of the answer refusing a request ``verdict`` (its body: ``refusal_body``)."""
    challenge = REALM if verdict == UNAUTHENTICATED else REALM + b', error="invalid_token"'
    return [(b"www-authenticate", challenge), (b"connection", b"close")]


def refusal_body(verdict: int) -> bytes:
    """The JSON body refusing a request ``verdict``: ``{"error": ...}``, as the API's errors."""
    return orjson.dumps({"error": _REFUSALS[verdict].decode()})


class GuardedApp:
    """``app`` served only to requests with a known bearer token (``tokens``), but for the open
    paths; each refusal counted in ``metrics`` (None: not counted)."""

    def __init__(self, app: ASGIApp, tokens: BearerTokens, metrics: HttpMetrics | None) -> None:
        self._app = app
        self._tokens = tokens
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open_path(scope["path"]):
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        verdict = self._tokens.verdict(authorization_of(scope["headers"]))
        if verdict == ACCEPTED:
            await self._app(scope, receive, send)
            return
        body = refusal_body(verdict)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            *refusal_headers(verdict),
        ]
        await send({"type": "http.response.start", "status": verdict, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        if self._metrics is not None:
            from swa_es.service.http_metrics import route_of

            self._metrics.answered(route_of(scope["path"]), verdict, time.perf_counter() - started)


def _readable(path: Path, where: str) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise SettingError(where, exc.strerror or str(exc)) from None


def server_tls_context(
    cert: Path,
    key: Path,
    client_ca: Path | None = None,
    *,
    flags: tuple[str, str, str] = ("--http-tls-cert", "--http-tls-key", "--http-tls-client-ca"),
) -> ssl.SSLContext:
    """A server's TLS context (TLS 1.2 or later) with the certificate chain ``cert`` and its
    private key ``key``; with ``client_ca``, every client must present a certificate that CA
    signed. A file that cannot be read or used is a ``SettingError`` naming its flag
    (``flags``: those of ``cert``, ``key`` and ``client_ca``)."""
    cert_flag, key_flag, ca_flag = flags
    _readable(cert, f"{cert_flag} {cert}")
    _readable(key, f"{key_flag} {key}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise SettingError(
            f"{cert_flag} {cert}",
            f"cannot be served with {key_flag} {key} ({exc.reason or exc}): a PEM certificate "
            "chain and the PEM private key that matches it",
        ) from None
    if client_ca is not None:
        where = f"{ca_flag} {client_ca}"
        _readable(client_ca, where)
        try:
            context.load_verify_locations(cafile=client_ca)
        except ssl.SSLError as exc:
            raise SettingError(where, f"no PEM CA certificate ({exc.reason or exc})") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True, slots=True)
class HttpSecurity:
    """How a server admits clients: ``tokens`` (None: no bearer token asked), ``tls`` (None:
    plain HTTP), and ``insecure``: whether it may serve other machines without them."""

    tokens: BearerTokens | None = None
    tls: ssl.SSLContext | None = None
    insecure: bool = False

    @property
    def client_certificates(self) -> bool:
        """Whether clients must present a certificate (mutual TLS)."""
        return self.tls is not None and self.tls.verify_mode == ssl.CERT_REQUIRED

    def describe(self) -> str:
        """What protects the server, in words (never a token)."""
        parts = []
        if self.tokens is not None:
            parts.append("bearer token")
        if self.tls is not None:
            parts.append("TLS with client certificates" if self.client_certificates else "TLS")
        return ", ".join(parts) or "no authentication, no TLS"

    def exposure(self, host: str, host_flag: str) -> str | None:
        """Check a server about to bind ``host`` (given by ``host_flag``): a warning to log
        when it serves other machines unprotected because ``insecure`` says so, else None.

        A host other than the loopback needs TLS and an authentication (bearer tokens or
        client certificates); without them, and without ``insecure``, a ``SettingError``
        naming ``host_flag`` and the flags that would protect it."""
        if is_loopback(host):
            return None
        authenticated = self.tokens is not None or self.client_certificates
        if self.tls is not None and authenticated:
            return None
        missing = []
        if not authenticated:
            missing.append(f"{TOKEN_FILE_FLAG} (or {TOKEN_VARIABLE})")
        if self.tls is None:
            missing.append("--http-tls-cert with --http-tls-key")
        if self.insecure:
            return (
                f"{host_flag} {host}: serving other machines without "
                f"{' and '.join(missing)}, as {INSECURE_FLAG} allows"
            )
        raise SettingError(
            f"{host_flag} {host}",
            f"serves other machines, so it needs {' and '.join(missing)}; or give "
            f"{INSECURE_FLAG} to serve them unprotected (a private test network only)",
        )
