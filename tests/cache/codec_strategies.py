"""Hypothesis strategies for the codec tests: random valid batches of both wire versions, with
chains of stores (what version 2 joins), typed metas with extra keys, and JSON values."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
)
from cache.events.meta import TYPED_FIELDS

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
    """One page per event, each page's parent the previous page: what version 2 joins."""
    size = draw(st.integers(min_value=1, max_value=4))
    pages = draw(st.integers(min_value=1, max_value=6))
    parent = draw(st.none() | INT64)
    lora_id = draw(st.none() | INT64)
    medium = draw(MEDIUM)
    chain: list[Event] = []
    for block_hash in draw(st.lists(INT64, min_size=pages, max_size=pages)):
        tokens = tuple(draw(st.lists(TOKEN, min_size=size, max_size=size)))
        chain.append(BlockStored((block_hash,), parent, tokens, size, lora_id, medium))
        parent = block_hash
    return chain


SINGLE_EVENTS: st.SearchStrategy[Event] = st.one_of(
    st.builds(BlockRemoved, HASHES, MEDIUM),
    HASHES.map(BlockSWAEvicted),
    HASHES.map(BlockSWARestored),
    st.just(AllBlocksCleared()),
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
