"""The typed ``meta`` of an epoch's first batch: what a consumer needs to interpret a source.

``page_size`` and ``sliding_window_size`` are required positive ints. ``digest_alg`` names the
state digest's algorithm (a follower that does not know it, or finds none, treats the source's
digests as unverifiable). ``swa_events`` says whether the producer reports SWA evictions and
restores (engine streams without tombstones say False). ``device``, ``producer`` and
``digest_every_batches`` describe the producer. ``token_ids`` says whether the source's stores
carry their token ids: False for a token-free source, whose writer withholds them (each
``BlockStored`` then has ``token_ids=()``; docs/security.md). Any other key is kept as it came,
in ``extra``.

A ``BatchMeta`` is also a read-only mapping of its JSON object (typed fields at their defaults
are left out), so ``meta["page_size"]``, ``meta.get(...)`` and ``dict(meta)`` work as they did
when ``meta`` was a plain dict.

The rules live once, in the native decoder (``native/src/codec/meta.rs``): a decoded record's
``BatchMeta`` is made from its parse, and ``from_json``, ``from_dict`` and the constructor ask it
too. This module is the typed face; the pure-Python twin that the differential tests hold equal
to it is ``tests.oracles.meta``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cache.events import _native
from cache.events.digest import DIGEST_ALGORITHM
from cache.events.errors import DecodeError

TYPED_FIELDS: Final = (
    "page_size",
    "sliding_window_size",
    "digest_alg",
    "swa_events",
    "device",
    "producer",
    "digest_every_batches",
    "token_ids",
)
"""The typed keys, in the order they are checked."""
_DEFAULTS: Final[dict[str, Any]] = {
    "digest_alg": None,
    "swa_events": True,
    "device": None,
    "producer": None,
    "digest_every_batches": None,
    "token_ids": True,
}


def _json_text(raw: Mapping[str, Any]) -> bytes:
    """``raw`` as JSON text; ``DecodeError`` names the first key whose value is not JSON."""
    try:
        return orjson.dumps(raw)
    except orjson.JSONEncodeError:
        pass
    for key, value in raw.items():
        try:
            orjson.dumps({key: value})
        except orjson.JSONEncodeError:
            shown = f"{value} (beyond 64 bits)" if type(value) is int else type(value).__name__
            raise DecodeError(f"meta.{key}", f"not a JSON value: {shown}") from None
    raise DecodeError("meta", "not a JSON object")


@dataclass(frozen=True, slots=True, eq=False)
class BatchMeta(Mapping[str, Any]):
    """What a consumer needs to interpret a source's batches (see the module docstring).

    Made wrong, it raises ``DecodeError`` (a ``ValueError``) naming the field, as the decoder
    would for the same JSON."""

    page_size: int
    sliding_window_size: int
    digest_alg: str | None = None
    swa_events: bool = True
    device: str | None = None
    producer: str | None = None
    digest_every_batches: int | None = None
    token_ids: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        typed = {name: getattr(self, name) for name in TYPED_FIELDS}
        _native.parse_meta(_json_text(typed).decode())
        clash = sorted(set(self.extra) & set(TYPED_FIELDS))
        if clash:
            raise ValueError(f"meta.extra: {clash[0]!r} is a typed field, not an extra key")
        object.__setattr__(self, "extra", dict(self.extra))

    @classmethod
    def from_json(cls, text: str | bytes) -> BatchMeta:
        """Check a meta JSON object's text; ``DecodeError`` names the first wrong typed field."""
        if isinstance(text, bytes):
            try:
                text = text.decode()
            except UnicodeDecodeError:
                raise DecodeError("meta", "not UTF-8") from None
        meta: BatchMeta = _native.parse_meta(text)
        return meta

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> BatchMeta:
        """``from_json`` of a meta JSON object held as a mapping."""
        return cls.from_json(_json_text(raw))

    @staticmethod
    def _extra_keys(text: str) -> dict[str, Any]:
        """The keys of a checked meta object's text besides the typed ones (the native parse
        asks for these only when there are any)."""
        raw: dict[str, Any] = orjson.loads(text)
        return {key: value for key, value in raw.items() if key not in TYPED_FIELDS}

    @property
    def digest_verifiable(self) -> bool:
        """Whether this build computes the source's digest the way its producer does."""
        return self.digest_alg == DIGEST_ALGORITHM

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: typed fields not at their default, then the extra keys."""
        out: dict[str, Any] = {
            "page_size": self.page_size,
            "sliding_window_size": self.sliding_window_size,
        }
        for name, default in _DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = value
        out.update(self.extra)
        return out

    def to_json(self) -> bytes:
        """The JSON text of ``to_dict()``."""
        return orjson.dumps(self.to_dict())

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        return f"BatchMeta({self.to_dict()!r})"
