"""Liveness records: a source's heartbeat and its offline marker, beside its batches in the log.

A liveness record is not a batch. It is a small JSON object that starts with the bytes
``LIVENESS_PREFIX`` (a batch starts with ``{"v":``), so a reader tells the two apart from the
first bytes, before any batch decoding::

    {"live": "heartbeat", "source": "worker-0", "epoch": "3f2c…", "seq": 41}
    {"live": "offline", "source": "worker-0", "epoch": "3f2c…", "seq": 57, "reason": "stopped"}

``epoch`` and ``seq`` are those of the last batch the source published before the record, so
the record is ordered with the source's batches: a reader whose cursor for the source stands at
exactly ``(epoch, seq)`` hears it; one from another epoch, or from before the cursor, is stale
and skipped like any stale record (see ``consumers.cursor``). A heartbeat says "still alive, and
nothing published since seq"; an offline marker says the source stopped (a clean stop of a
primary, a bridge whose engine is gone), and holds until a later batch or heartbeat.

Decoding is strict, like the batch codec's: a wrong field raises ``DecodeError`` naming it.
The encoding is plain JSON (orjson), so ``swa-es inspect`` can print it as it is.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import orjson

from cache.events.errors import DecodeError

LIVENESS_PREFIX: Final = b'{"live":'
"""The first bytes of every liveness record (never those of a batch)."""
MAX_LIVENESS_BYTES: Final = 4096
"""The largest liveness record decoded (a reason is cut to fit well within it)."""
MAX_REASON_CHARS: Final = 512

_FIELDS: Final = frozenset({"live", "source", "epoch", "seq"})
_MAX_SEQ: Final = (1 << 63) - 1


class Liveness(enum.Enum):
    """What a liveness record says."""

    HEARTBEAT = "heartbeat"
    OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class LivenessRecord:
    """One liveness record: ``source`` is ``kind`` after batch ``seq`` of ``epoch``.

    ``reason`` (offline markers only) says why, for operators.
    """

    kind: Liveness
    source: str
    epoch: str
    seq: int
    reason: str | None = None

    def __post_init__(self) -> None:
        if type(self.source) is not str or not self.source:
            raise ValueError(f"source: expected a non-empty str, got {self.source!r}")
        if type(self.epoch) is not str or not self.epoch:
            raise ValueError(f"epoch: expected a non-empty str, got {self.epoch!r}")
        if type(self.seq) is not int or not 0 <= self.seq <= _MAX_SEQ:
            raise ValueError(f"seq: expected an int in [0, 2**63), got {self.seq!r}")
        if self.kind is Liveness.HEARTBEAT and self.reason is not None:
            raise ValueError("reason: a heartbeat carries none")


def is_liveness(payload: bytes) -> bool:
    """Whether ``payload`` is a liveness record rather than a batch (its first bytes only)."""
    return payload.startswith(LIVENESS_PREFIX)


def heartbeat(source: str, epoch: str, seq: int) -> LivenessRecord:
    """A heartbeat of ``source`` after batch ``seq`` of ``epoch``."""
    return LivenessRecord(Liveness.HEARTBEAT, source, epoch, seq)


def offline(source: str, epoch: str, seq: int, reason: str) -> LivenessRecord:
    """An offline marker of ``source`` after batch ``seq`` of ``epoch``, saying why."""
    return LivenessRecord(Liveness.OFFLINE, source, epoch, seq, reason[:MAX_REASON_CHARS])


def encode_liveness(record: LivenessRecord) -> bytes:
    """The bytes of ``record`` (they start with ``LIVENESS_PREFIX``)."""
    body: dict[str, object] = {
        "live": record.kind.value,
        "source": record.source,
        "epoch": record.epoch,
        "seq": record.seq,
    }
    if record.reason is not None:
        body["reason"] = record.reason
    return orjson.dumps(body)


def decode_liveness(payload: bytes) -> LivenessRecord:
    """The record ``encode_liveness`` wrote; ``DecodeError`` naming the bad field otherwise."""
    if not is_liveness(payload):
        raise DecodeError("live", "not a liveness record")
    if len(payload) > MAX_LIVENESS_BYTES:
        raise DecodeError(
            "", f"liveness record of {len(payload)} bytes exceeds {MAX_LIVENESS_BYTES}"
        )
    try:
        raw = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("", f"liveness record is not JSON: {exc}") from None
    if type(raw) is not dict:
        raise DecodeError("", "liveness record must be a JSON object")
    try:
        kind = Liveness(raw.get("live"))
    except ValueError:
        raise DecodeError(
            "live", f"expected 'heartbeat' or 'offline', got {raw.get('live')!r}"
        ) from None
    allowed = _FIELDS | {"reason"} if kind is Liveness.OFFLINE else _FIELDS
    for name in sorted(set(raw) - allowed):
        raise DecodeError(name, "unknown field")
    for name in sorted(_FIELDS - set(raw)):
        raise DecodeError(name, "missing")
    source, epoch, seq = raw["source"], raw["epoch"], raw["seq"]
    if type(source) is not str or not source:
        raise DecodeError("source", f"expected a non-empty string, got {source!r}")
    if type(epoch) is not str or not epoch:
        raise DecodeError("epoch", f"expected a non-empty string, got {epoch!r}")
    if type(seq) is not int or not 0 <= seq <= _MAX_SEQ:
        raise DecodeError("seq", f"expected an int in [0, 2**63), got {seq!r}")
    reason = raw.get("reason")
    if kind is Liveness.OFFLINE and type(reason) is not str:
        raise DecodeError("reason", f"expected a string, got {reason!r}")
    return LivenessRecord(kind, source, epoch, seq, reason)
