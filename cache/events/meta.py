"""The typed ``meta`` of an epoch's first batch: what a consumer needs to interpret a source.

``page_size`` and ``sliding_window_size`` are required positive ints. ``digest_alg`` names the
state digest's algorithm (a follower that does not know it, or finds none, treats the source's
digests as unverifiable). ``swa_events`` says whether the producer reports SWA evictions and
restores (engine streams without tombstones say False). ``device``, ``producer`` and
``digest_every_batches`` describe the producer. Any other key is kept as it came, in ``extra``.

A ``BatchMeta`` is also a read-only mapping of its JSON object (typed fields at their defaults
are left out), so ``meta["page_size"]``, ``meta.get(...)`` and ``dict(meta)`` work as they did
when ``meta`` was a plain dict. The native decoder applies the same checks
(``native/src/codec/meta.rs``); the differential tests hold the two equal.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cache.events.errors import DecodeError

_UINT64_LIMIT: Final = 1 << 64
_REQUIRED: Final = ("page_size", "sliding_window_size")
_OPTIONAL_STR: Final = ("digest_alg", "device", "producer")
TYPED_FIELDS: Final = (
    "page_size",
    "sliding_window_size",
    "digest_alg",
    "swa_events",
    "device",
    "producer",
    "digest_every_batches",
)
"""The typed keys, in the order they are checked."""
_DEFAULTS: Final[dict[str, Any]] = {
    "digest_alg": None,
    "swa_events": True,
    "device": None,
    "producer": None,
    "digest_every_batches": None,
}
_MISSING: Final = object()


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _describe(value: object) -> str:
    return str(value) if type(value) is int else _type_name(value)


def _positive(value: object) -> bool:
    return type(value) is int and 0 < value < _UINT64_LIMIT


def field_problem(name: str, value: object) -> str | None:
    """Why ``value`` (``_MISSING`` when absent) is not valid for the typed key ``name``."""
    if name in _REQUIRED:
        if value is _MISSING:
            return "missing"
        return None if _positive(value) else f"expected a positive int, got {_describe(value)}"
    if value is _MISSING or value is None:
        return "expected bool, got null" if name == "swa_events" and value is None else None
    if name in _OPTIONAL_STR:
        return None if type(value) is str else f"expected str or null, got {_type_name(value)}"
    if name == "swa_events":
        return None if type(value) is bool else f"expected bool, got {_type_name(value)}"
    return None if _positive(value) else f"expected a positive int or null, got {_describe(value)}"


@dataclass(frozen=True, slots=True, eq=False)
class BatchMeta(Mapping[str, Any]):
    """What a consumer needs to interpret a source's batches (see the module docstring)."""

    page_size: int
    sliding_window_size: int
    digest_alg: str | None = None
    swa_events: bool = True
    device: str | None = None
    producer: str | None = None
    digest_every_batches: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in TYPED_FIELDS:
            problem = field_problem(name, getattr(self, name))
            if problem is not None:
                raise ValueError(f"meta.{name}: {problem}")
        clash = sorted(set(self.extra) & set(TYPED_FIELDS))
        if clash:
            raise ValueError(f"meta.extra: {clash[0]!r} is a typed field, not an extra key")
        object.__setattr__(self, "extra", dict(self.extra))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> BatchMeta:
        """Validate a meta JSON object; ``DecodeError`` names the first wrong typed field."""
        for name in TYPED_FIELDS:
            problem = field_problem(name, raw.get(name, _MISSING))
            if problem is not None:
                raise DecodeError(f"meta.{name}", problem)
        typed = {name: raw[name] for name in TYPED_FIELDS if raw.get(name) is not None}
        extra = {key: value for key, value in raw.items() if key not in TYPED_FIELDS}
        return cls(**typed, extra=extra)

    @classmethod
    def from_json(cls, text: str | bytes) -> BatchMeta:
        """``from_dict`` of a JSON object's text."""
        raw = orjson.loads(text)
        if type(raw) is not dict:
            raise DecodeError("meta", f"expected an object or null, got {_type_name(raw)}")
        return cls.from_dict(raw)

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
