"""Building many per-page events fast.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; for one event
per page that dominates the event path. ``BlockStored`` is slotted, so these builders fill its
slots directly through the slot descriptors, which is the same state ``__init__`` produces (a
test checks equality). Block hashes of many digests are unpacked with one struct call.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import fields
from functools import lru_cache
from itertools import repeat
from typing import Final

from cache.events.types import MEDIUM_GPU, BlockStored

_FIELDS: Final = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
if tuple(f.name for f in fields(BlockStored)) != _FIELDS:  # pragma: no cover - guards a refactor
    raise ImportError("cache.events.build is out of date with cache.events.BlockStored's fields")

_new = object.__new__
_set_hashes, _set_parent, _set_tokens, _set_size, _set_lora, _set_medium = (
    BlockStored.__dict__[name].__set__ for name in _FIELDS
)


def build_stored(
    hashes: list[int], parents: list[int | None], tokens: tuple[int, ...], page_size: int
) -> list[BlockStored]:
    """One ``BlockStored`` per page, equal to ``BlockStored((h,), parent, page, page_size)``.

    Every step runs as ``map`` over C callables (instance creation, slot setters, ``zip`` for
    the one-element hash tuples and the page tuples), so no Python bytecode runs per page.
    """
    count = len(hashes)
    events: list[BlockStored] = list(map(_new, repeat(BlockStored, count)))
    pages = zip(tokens) if page_size == 1 else zip(*[iter(tokens)] * page_size, strict=True)
    columns = (
        (_set_hashes, zip(hashes)),
        (_set_parent, parents),
        (_set_tokens, pages),
        (_set_size, repeat(page_size, count)),
        (_set_lora, repeat(None, count)),
        (_set_medium, repeat(MEDIUM_GPU, count)),
    )
    for setter, values in columns:
        deque(map(setter, events, values), maxlen=0)
    return events


@lru_cache(maxsize=64)
def _unpacker(count: int) -> struct.Struct:
    return struct.Struct(">" + "q24x" * count)


def block_hashes_fast(digests: list[bytes]) -> list[int]:
    """The signed int64 event id of each 32-byte digest (as ``block_hashes_of``), in one call."""
    count = len(digests)
    if count > 4096:  # keep the cached format strings small
        return [h for i in range(0, count, 4096) for h in block_hashes_fast(digests[i : i + 4096])]
    return list(_unpacker(count).unpack(b"".join(digests)))
