"""Parsers of setting values: ``(text, where) -> value``, raising ``SettingError`` naming
``where`` (the flag, positional or ``SWA_ES_*`` variable the text came from).

An option (``swa_es.options.option``) names one of these; nothing here reads the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import urlsplit

from cache.errors import SwaEsError
from consumers.snapshots.opening import STORE_SCHEMES
from log.opening import log_schemes
from log.position import Position

S = TypeVar("S", bound=StrEnum)

DEVICES: Final = ("cpu", "cuda")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


class SettingError(SwaEsError, ValueError):
    """A flag or ``SWA_ES_*`` variable has a bad value; ``what`` names where it came from."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what}: {reason}")


def positive_int(text: str, where: str) -> int:
    """An int >= 1."""
    value = _int(text, where)
    if value < 1:
        raise SettingError(where, f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str, where: str) -> int:
    """An int >= 0."""
    value = _int(text, where)
    if value < 0:
        raise SettingError(where, f"must not be negative, got {value}")
    return value


def port(text: str, where: str) -> int:
    """A TCP port (0 = pick a free one)."""
    value = _int(text, where)
    if not 0 <= value <= 65535:
        raise SettingError(where, f"must be a TCP port 0..65535, got {value}")
    return value


def positive_float(text: str, where: str) -> float:
    """A float > 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise SettingError(where, f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise SettingError(where, f"must be a positive finite number, got {text!r}")
    return value


def device(text: str, where: str) -> str:
    """A torch device name: ``cpu``, ``cuda`` or ``cuda:N``."""
    base = text.split(":", 1)[0]
    if base not in DEVICES or (":" in text and not text.split(":", 1)[1].isdigit()):
        raise SettingError(where, f"expected cpu, cuda or cuda:N, got {text!r}")
    return text


def text_value(text: str, where: str) -> str:
    """A non-empty string."""
    if not text.strip():
        raise SettingError(where, "must not be empty")
    return text


def path(text: str, where: str) -> Path:
    """A filesystem path (``~`` expanded)."""
    return Path(text_value(text, where)).expanduser()


def log_url(text: str, where: str) -> str:
    """A log URL of a scheme ``open_log`` knows (``log.log_schemes()``: ``file://``,
    ``kafka://``, ``memory://``), or a directory path meaning a FileLog there."""
    text = text_value(text, where)
    scheme = urlsplit(text).scheme
    if not scheme:
        return Path(text).expanduser().resolve().as_uri()
    names = [registered.name for registered in log_schemes()]
    if scheme not in names:
        raise SettingError(
            where, f"unknown log scheme {scheme!r} in {text!r} (one of {', '.join(names)})"
        )
    return text


def snapshot_store(text: str, where: str) -> str:
    """A snapshot store: a URL of a scheme ``open_snapshot_store`` knows (``STORE_SCHEMES``:
    ``kafka://``, a compacted topic; ``file://``) or a directory path (returned absolute)."""
    text = text_value(text, where)
    scheme = urlsplit(text).scheme
    if not scheme:
        return str(Path(text).expanduser().resolve())
    if scheme not in STORE_SCHEMES:
        raise SettingError(
            where,
            f"unknown snapshot store scheme {scheme!r} in {text!r} (a directory, "
            f"{', '.join(STORE_SCHEMES)})",
        )
    return text


def token_list(text: str, where: str) -> tuple[int, ...]:
    """Token ids separated by commas or spaces, or ``A..B`` for the range A..B-1."""
    tokens: list[int] = []
    for part in text.replace(",", " ").split():
        low, dots, high = part.partition("..")
        if dots:
            tokens.extend(range(_int(low, where), _int(high, where)))
        else:
            tokens.append(_int(part, where))
    if not tokens:
        raise SettingError(where, "no token ids given")
    if any(not 0 <= t < 2**32 for t in tokens):
        raise SettingError(where, "token ids must be in 0..2**32-1")
    return tuple(tokens)


def position(text: str, where: str) -> Position:
    """A log position: ``N`` (offset N of partition 0) or ``P:N,P:N`` (per partition)."""
    pairs: dict[int, int] = {}
    for part in text.split(","):
        partition, colon, offset = part.strip().rpartition(":")
        pairs[_int(partition, where) if colon else 0] = _int(offset, where)
    try:
        return Position.of(pairs)
    except ValueError as exc:
        raise SettingError(where, str(exc)) from None


def _int(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SettingError(where, f"expected an integer, got {text!r}") from None


def boolean(text: str, where: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (a switch given as a flag is ``1``)."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingError(where, f"expected 1/true/yes/on or 0/false/no/off, got {text!r}")


def zmq_endpoint(text: str, where: str) -> str:
    """A ZMQ endpoint: ``tcp://HOST:PORT`` or ``ipc://PATH``."""
    if not text.startswith(("tcp://", "ipc://")) or len(text) <= len("tcp://"):
        raise SettingError(where, f"expected a tcp:// or ipc:// endpoint, got {text!r}")
    return text


def choice(*allowed: str) -> Callable[[str, str], str]:
    """A parser accepting exactly one of ``allowed``."""

    def parse(text: str, where: str) -> str:
        if text not in allowed:
            raise SettingError(where, f"expected one of {', '.join(allowed)}, got {text!r}")
        return text

    parse.__name__ = f"choice({', '.join(allowed)})"
    return parse


def member_of(kind: type[S]) -> Callable[[str, str], S]:
    """A parser accepting the value of one member of the string enum ``kind``."""
    allowed = choice(*kind)

    def parse(text: str, where: str) -> S:
        return kind(allowed(text, where))

    parse.__name__ = f"member_of({kind.__name__})"
    return parse
