"""The typed ``meta``'s rules: the pure-Python twin of the native check
(``native/src/codec/meta.rs``), which ``cache.events.meta.BatchMeta`` asks.

``page_size`` and ``sliding_window_size`` are required positive ints (below 2**64);
``digest_alg``, ``device`` and ``producer`` strings or null; ``swa_events`` and ``token_ids``
bools (absent: true); ``digest_every_batches`` a positive int or null. Other keys are not
judged. The first wrong typed field, in ``TYPED_FIELDS`` order, is named:
``DecodeError("meta.<field>", reason)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cache.events.errors import DecodeError
from cache.events.meta import TYPED_FIELDS, BatchMeta

_UINT64_LIMIT: Final = 1 << 64
_REQUIRED: Final = ("page_size", "sliding_window_size")
_OPTIONAL_STR: Final = ("digest_alg", "device", "producer")
_FLAGS: Final = ("swa_events", "token_ids")
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
        return "expected bool, got null" if name in _FLAGS and value is None else None
    if name in _OPTIONAL_STR:
        return None if type(value) is str else f"expected str or null, got {_type_name(value)}"
    if name in _FLAGS:
        return None if type(value) is bool else f"expected bool, got {_type_name(value)}"
    return None if _positive(value) else f"expected a positive int or null, got {_describe(value)}"


def meta_from_dict(raw: Mapping[str, Any]) -> BatchMeta:
    """Check a meta JSON object by these rules, then make its ``BatchMeta``."""
    for name in TYPED_FIELDS:
        problem = field_problem(name, raw.get(name, _MISSING))
        if problem is not None:
            raise DecodeError(f"meta.{name}", problem)
    typed = {name: raw[name] for name in TYPED_FIELDS if raw.get(name) is not None}
    extra = {key: value for key, value in raw.items() if key not in TYPED_FIELDS}
    return BatchMeta(**typed, extra=extra)
