"""CURVE on the follower's ZMQ sockets: its key pair, the allow-list of client keys, and ZAP.

``CurveServer`` makes every socket ``follow`` binds (stream out, replay, snapshot) a CURVE
server with one key pair, and runs the ZAP handler (pyzmq's ``AsyncioAuthenticator``) of the
context they share, admitting exactly the public keys of ``--zmq-curve-clients``'s ``*.key``
files. The directory is re-read when a file in it changes, so a client is added or removed
without a restart. A refused key is logged and counted (``refused``); a client that does not
speak CURVE at all fails its handshake before ZAP is asked, and gets nothing either.
"""

from __future__ import annotations

import logging
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from swa_es.bridge.curve import CurveKeyError, CurveKeyPair, load_key_pair
from swa_es.egress.config import ZmqServerSecurity

logger = logging.getLogger(__name__)

ZAP_DOMAIN = "swa-es"

_Signature = tuple[tuple[str, int, int], ...]


class AllowList:
    """The client public keys in ``directory``'s ``*.key`` files, re-read when they change."""

    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise CurveKeyError(
                f"--zmq-curve-clients {directory}", "is not a directory of client public keys"
            )
        self.directory = directory
        self._signature: _Signature | None = None
        self._keys: frozenset[bytes] = frozenset()
        self.refused = 0
        self.admitted = 0
        self.keys()

    def _current(self) -> _Signature:
        entries = []
        for path in sorted(self.directory.glob("*.key")):
            try:
                stat = path.stat()
            except OSError:
                continue
            entries.append((path.name, stat.st_mtime_ns, stat.st_size))
        return tuple(entries)

    def keys(self) -> frozenset[bytes]:
        """The admitted public keys (z85), re-read if a ``*.key`` file changed."""
        signature = self._current()
        if signature == self._signature:
            return self._keys
        keys = set()
        for name, _, _ in signature:
            try:
                public, _ = zmq.auth.load_certificate(self.directory / name)
            except (ValueError, OSError) as exc:
                logger.warning("zmq curve: skipping client key %s: %s", name, exc)
                continue
            keys.add(public)
        self._signature, self._keys = signature, frozenset(keys)
        logger.info("zmq curve: %d client keys admitted from %s", len(keys), self.directory)
        return self._keys

    def callback(self, domain: str, client_key: bytes) -> bool:
        """ZAP's question (pyzmq's credentials provider): is ``client_key`` (z85) admitted?"""
        if client_key in self.keys():
            self.admitted += 1
            return True
        self.refused += 1
        logger.warning(
            "zmq curve: refused client key %s (not in %s; %d refused so far)",
            client_key.decode("ascii", "replace"),
            self.directory,
            self.refused,
        )
        return False


class CurveServer:
    """The key pair and ZAP handler of the follower's ZMQ sockets (``start`` before binding
    any, ``stop`` before the context is terminated)."""

    def __init__(self, keys: CurveKeyPair, allowed: AllowList) -> None:
        self.keys = keys
        self.allowed = allowed
        self._auth: AsyncioAuthenticator | None = None

    @classmethod
    def of(cls, security: ZmqServerSecurity) -> CurveServer | None:
        """The server of ``follow``'s options (None: plain sockets); ``CurveKeyError`` for a
        key or directory that cannot be read."""
        if security.secret_key_file is None or security.clients is None:
            return None
        if not zmq.has("curve"):
            raise CurveKeyError("--zmq-curve-secret-key-file", "this libzmq has no CURVE")
        keys = load_key_pair(security.secret_key_file, "--zmq-curve-secret-key-file")
        return cls(keys, AllowList(security.clients))

    def start(self, context: zmq.asyncio.Context) -> None:
        """Run the ZAP handler of ``context`` (once per context)."""
        auth = AsyncioAuthenticator(context, log=logging.getLogger(f"{__name__}.zap"))
        auth.start()
        auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=self.allowed)
        self._auth = auth

    def stop(self) -> None:
        """Stop the ZAP handler (its socket closed)."""
        auth, self._auth = self._auth, None
        if auth is not None:
            auth.stop()

    def apply(self, socket: zmq.asyncio.Socket) -> None:
        """Make ``socket`` a CURVE server checked by ZAP (before it binds)."""
        socket.curve_secretkey = self.keys.secret
        socket.curve_publickey = self.keys.public
        socket.curve_server = True
        socket.zap_domain = ZAP_DOMAIN.encode()
