"""Building many per-page events fast.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; for one event
per page that dominates the event path. ``BlockStored`` is slotted, so these builders fill its
slots directly through the slot descriptors, which is the same state ``__init__`` produces (a
test checks equality). Block hashes of many digests are unpacked with one struct call.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import lru_cache
from typing import Final

from cache.events import MEDIUM_GPU, BlockStored

_FIELDS: Final = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
if tuple(f.name for f in fields(BlockStored)) != _FIELDS:  # pragma: no cover - guards a refactor
    raise ImportError("cache.event_build is out of date with cache.events.BlockStored's fields")

_new = object.__new__
_set_hashes, _set_parent, _set_tokens, _set_size, _set_lora, _set_medium = (
    BlockStored.__dict__[name].__set__ for name in _FIELDS
)


def build_stored(
    hashes: list[int], parents: list[int | None], tokens: tuple[int, ...], page_size: int
) -> list[BlockStored]:
    """One ``BlockStored`` per page, equal to ``BlockStored((h,), parent, page, page_size)``."""
    out: list[BlockStored] = []
    append = out.append
    start = 0
    for h, parent in zip(hashes, parents, strict=True):
        event = _new(BlockStored)
        _set_hashes(event, (h,))
        _set_parent(event, parent)
        _set_tokens(event, tokens[start : start + page_size])
        _set_size(event, page_size)
        _set_lora(event, None)
        _set_medium(event, MEDIUM_GPU)
        append(event)
        start += page_size
    return out


@lru_cache(maxsize=64)
def _unpacker(count: int) -> struct.Struct:
    return struct.Struct(">" + "q24x" * count)


def block_hashes_fast(digests: list[bytes]) -> list[int]:
    """The signed int64 event id of each 32-byte digest (as ``block_hashes_of``), in one call."""
    count = len(digests)
    if count > 4096:  # keep the cached format strings small
        return [h for i in range(0, count, 4096) for h in block_hashes_fast(digests[i : i + 4096])]
    return list(_unpacker(count).unpack(b"".join(digests)))
