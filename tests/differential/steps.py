"""The operations a differential sequence is made of, and their JSON form.

Plain frozen data, standard library only: this module is imported both by the test process and
by the driver that runs inside sglang's venv (``tests.differential.sglang_driver``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """One pair of caches: pool sizes in tokens (whole pages), page size, window."""

    page_size: int
    window: int
    full_size: int
    swa_size: int


@dataclass(frozen=True, slots=True)
class Request:
    """Serve ``tokens``: match → lock → alloc (evicting when short) → insert → unlock.

    The match is of the first ``prompt`` tokens (an engine matches the prompt and later inserts
    prompt and output), the insert of all of them. With ``hold`` the lock is kept after the
    insert (a request still running) until a later ``Finish`` or ``Reset`` releases it.
    """

    tokens: tuple[int, ...]
    prompt: int
    hold: bool = False


@dataclass(frozen=True, slots=True)
class Finish:
    """Release the lock of held request number ``pick`` modulo how many are held (none: no-op)."""

    pick: int


@dataclass(frozen=True, slots=True)
class Evict:
    """A bare ``evict(full, swa)``."""

    full: int
    swa: int


@dataclass(frozen=True, slots=True)
class Reset:
    """Release every held lock, then reset the cache (sglang: and clear its allocator)."""


@dataclass(frozen=True, slots=True)
class Scratch:
    """Allocator only: alloc ``pages`` pages, ``free_swa`` slots ``[start, stop)``, free all.

    ``start``/``stop`` are slot offsets, so they can cut a page in two.
    """

    pages: int
    start: int
    stop: int


Step: TypeAlias = Request | Finish | Evict | Reset | Scratch

_KINDS: dict[str, type[Request] | type[Finish] | type[Evict] | type[Reset] | type[Scratch]] = {
    "request": Request,
    "finish": Finish,
    "evict": Evict,
    "reset": Reset,
    "scratch": Scratch,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def step_to_json(step: Step) -> dict[str, Any]:
    """``step`` as a JSON object with a ``kind`` field."""
    return {"kind": _NAMES[type(step)], **asdict(step)}


def step_from_json(data: dict[str, Any]) -> Step:
    """The step ``step_to_json`` wrote; raises ValueError on an unknown kind or field."""
    fields = dict(data)
    kind = fields.pop("kind", None)
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown step kind {kind!r}")
    if cls is Request:
        tokens = tuple(int(t) for t in fields["tokens"])
        return Request(tokens, int(fields["prompt"]), bool(fields.get("hold", False)))
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"bad {kind} step {data!r}: {exc}") from exc


def config_to_json(config: CacheConfig) -> dict[str, Any]:
    """``config`` as a JSON object."""
    return asdict(config)


def config_from_json(data: dict[str, Any]) -> CacheConfig:
    """The config ``config_to_json`` wrote."""
    return CacheConfig(**{k: int(v) for k, v in data.items()})
