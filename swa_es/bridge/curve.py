"""CURVE keys for ZMQ sockets: reading them, and making a socket a CURVE client.

A key is given as its 40-character z85 text, or as a file holding it: either as
``zmq.auth.create_certificates`` writes (``NAME.key``: the public key; ``NAME.key_secret``: the
pair), or the bare z85 text. ``swa-es bridge`` is a CURVE client of an engine that offers CURVE
(``--zmq-curve-server-key``, ``--zmq-curve-client-key-file``); ``swa_es.egress.curve`` makes the
follower's own sockets CURVE servers with the same readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import zmq
import zmq.auth
import zmq.utils.z85

from swa_es.options.values import SettingError

Z85_KEY_CHARS: Final = 40


class CurveKeyError(SettingError):
    """A CURVE key that cannot be read; ``what`` names the option (and file) that gave it."""


@dataclass(frozen=True, slots=True)
class CurveKeyPair:
    """A CURVE key pair as z85 bytes (the secret key never printed)."""

    public: bytes
    secret: bytes = b""

    def __repr__(self) -> str:
        return f"CurveKeyPair(public={self.public.decode()!r})"


def _z85_key(text: str) -> bytes | None:
    """``text`` as a z85 key when it is one (40 z85 characters decoding to 32 bytes)."""
    key = text.strip()
    if len(key) != Z85_KEY_CHARS:
        return None
    try:
        zmq.utils.z85.decode(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError, KeyError):
        return None
    return key.encode("ascii")


def _read(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CurveKeyError(where, exc.strerror or str(exc)) from None
    except UnicodeDecodeError:
        raise CurveKeyError(where, "is not text (expected a z85 key or a key file)") from None


def load_key_pair(path: Path, flag: str = "key file") -> CurveKeyPair:
    """The key pair in ``path``: a ``.key_secret`` file as ``zmq.auth.create_certificates``
    writes, or a file holding the z85 secret key alone (the public key is derived from it);
    ``flag`` names the option that gave it in errors."""
    where = f"{flag} {path}"
    text = _read(path, where)
    bare = _z85_key(text)
    if bare is not None:
        return CurveKeyPair(zmq.curve_public(bare), bare)
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise CurveKeyError(where, f"holds no CURVE key: {exc}") from None
    if not secret:
        raise CurveKeyError(
            where,
            "holds a public key only; give the key pair (the NAME.key_secret file that "
            "zmq.auth.create_certificates writes)",
        )
    return CurveKeyPair(public, secret)


def load_public_key(given: str, where: str) -> bytes:
    """A public key given as z85 text, or a file holding one (a ``.key`` or ``.key_secret``
    file, or the bare z85 text); ``where`` names the option for errors."""
    bare = _z85_key(given)
    if bare is not None:
        return bare
    path = Path(given)
    if not path.exists():
        raise CurveKeyError(where, f"{given!r} is neither a z85 key (40 characters) nor a file")
    text = _read(path, f"{where} {path}")
    bare = _z85_key(text)
    if bare is not None:
        return bare
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise CurveKeyError(f"{where} {path}", f"holds no CURVE public key: {exc}") from None
    return public


@dataclass(frozen=True, slots=True)
class CurveClient:
    """What a CURVE client needs: the server's public key and its own key pair."""

    server_key: bytes
    keys: CurveKeyPair

    def apply(self, socket: zmq.Socket[Any]) -> None:
        """Make ``socket`` a CURVE client of the server (before it connects)."""
        socket.curve_serverkey = self.server_key
        socket.curve_publickey = self.keys.public
        socket.curve_secretkey = self.keys.secret


def curve_client(server_key: str | None, client_key_file: Path | None) -> CurveClient | None:
    """The bridge's CURVE client from its options (None: plain sockets); both or neither."""
    if server_key is None and client_key_file is None:
        return None
    if server_key is None or client_key_file is None:
        raise CurveKeyError(
            "--zmq-curve-server-key" if server_key is None else "--zmq-curve-client-key-file",
            "is needed too: a CURVE client needs the engine's public key and its own key pair",
        )
    if not zmq.has("curve"):
        raise CurveKeyError("--zmq-curve-server-key", "this libzmq was built without CURVE")
    return CurveClient(
        load_public_key(server_key, "--zmq-curve-server-key"),
        load_key_pair(client_key_file, "--zmq-curve-client-key-file"),
    )
