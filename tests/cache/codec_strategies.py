"""Hypothesis strategies for the codec tests: random valid batches of both wire versions, with
chains of stores (what version 2 joins), typed metas with extra keys, and JSON values.

Every event type of the ``Event`` union is drawn: ``BlockStored`` as chains of stores, any other
from its dataclass fields, each drawn by its name (``FIELDS``); a type with a field not there
needs a strategy of its own here.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from hypothesis import strategies as st

from cache.events import BatchMeta, BlockStored, Event, EventBatch
from cache.events.meta import TYPED_FIELDS
from cache.events.types import EVENT_TYPES, late_fields

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
UINT64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
POSITIVE = st.integers(min_value=1, max_value=(1 << 64) - 1)
TOKEN = st.integers(min_value=0, max_value=0xFFFFFFFF)
TEXT = st.text(max_size=12)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
MEDIUM = st.none() | st.just("GPU") | TEXT
HASHES = st.lists(INT64, min_size=1, max_size=5).map(tuple)

JSON_SCALARS = st.none() | st.booleans() | INT64 | FINITE | TEXT
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def store_chains(draw: st.DrawFn) -> list[Event]:
    """One page per event, each page's parent the previous page: what version 2 joins; now and
    then every page without token ids (withheld by its writer)."""
    size = draw(st.integers(min_value=1, max_value=4))
    pages = draw(st.integers(min_value=1, max_value=6))
    parent = draw(st.none() | INT64)
    lora_id = draw(st.none() | INT64)
    medium = draw(MEDIUM)
    withheld = draw(st.integers(min_value=0, max_value=3)) == 0
    chain: list[Event] = []
    for block_hash in draw(st.lists(INT64, min_size=pages, max_size=pages)):
        tokens = () if withheld else tuple(draw(st.lists(TOKEN, min_size=size, max_size=size)))
        chain.append(BlockStored((block_hash,), parent, tokens, size, lora_id, medium))
        parent = block_hash
    return chain


FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "block_hashes": HASHES,
    "parent_block_hash": st.none() | INT64,
    "lora_id": st.none() | INT64,
    "medium": MEDIUM,
}
"""Each event field that can be drawn on its own, by name (a name means the same in every
type)."""


def from_fields(event_type: type[Event]) -> st.SearchStrategy[Event]:
    """Events of ``event_type`` drawn field by field (``FIELDS``); a field that a later wire
    version added stays unset (the batches drawn are of versions 1 and 2)."""
    late = late_fields(event_type)
    names = [f.name for f in fields(event_type) if f.name not in late]
    undrawn = sorted(set(names) - FIELDS.keys())
    if undrawn:
        raise TypeError(f"{event_type.__name__}.{undrawn[0]}: give the type its own strategy")
    return st.builds(event_type, **{name: FIELDS[name] for name in names})


SINGLE_EVENTS: st.SearchStrategy[Event] = st.one_of(
    *(from_fields(event_type) for event_type in EVENT_TYPES if event_type is not BlockStored)
)
EVENTS = st.lists(store_chains() | SINGLE_EVENTS.map(lambda event: [event]), max_size=8).map(
    lambda runs: tuple(event for run in runs for event in run)
)

METAS = st.builds(
    BatchMeta,
    page_size=POSITIVE,
    sliding_window_size=POSITIVE,
    digest_alg=st.none() | st.just("mix64-v1") | TEXT,
    swa_events=st.booleans(),
    device=st.none() | TEXT,
    producer=st.none() | TEXT,
    digest_every_batches=st.none() | POSITIVE,
    token_ids=st.booleans(),
    extra=st.dictionaries(
        TEXT.filter(lambda key: key not in TYPED_FIELDS), JSON_VALUES, max_size=3
    ),
)

BATCHES = st.builds(
    EventBatch,
    source=TEXT,
    epoch=TEXT,
    seq=UINT64,
    ts=FINITE,
    events=EVENTS,
    digest=st.none() | TEXT,
    meta=st.none() | METAS,
    v=st.sampled_from([1, 2]),
)
