"""A follower's state as the batches a fresh engine would have published to reach it.

``state_batches`` turns every source of a ``ReplicaSet`` into one batch: ``AllBlocksCleared``
then a ``BlockStored`` per block, parent before child (so a consumer that checks parents, such
as sgl-model-gateway's index, accepts every store), then a ``BlockStored`` on its medium for
every block a lower tier holds: with the GPU copy's parent and tokens where the GPU holds the
block too, else as vLLM's own offload placeholder (one hash, no parent, no tokens, block size
0), since a follower keeps a lower tier's hashes only.

``swa-es follow --zmq-publish`` starts its run with ``follower_state`` once the follower has
restored: at the follower's position with that state, so seq ``k`` onwards continues exactly
where the state stops. The capture is synchronous: the follower applies a record and advances
its position without yielding between the two, so the position and the replicas read here
agree.

The stream out sends every block's token ids, so it needs replicas that keep them
(``ReplicaSet(keep_tokens=True)``, which ``swa-es follow --zmq-publish`` builds): given a set
that keeps none, ``state_batches``, ``follower_capture`` and ``replica_lookup`` raise
``TokenIdsNotKeptError`` rather than send blocks without their tokens. A token-free source (its
meta says ``token_ids: false``; such replicas refuse its stores) has no state here: its blocks
are not sent at all (``swa_es.egress.stream``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockStored,
    BlockSWAEvicted,
    Event,
    EventBatch,
)
from consumers.views.replica import ReplicaBlock, ReplicaSet
from swa_es.egress.errors import EgressError
from swa_es.egress.residency import BlockLookup
from swa_es.egress.stream import StreamStart


class TokenIdsNotKeptError(EgressError):
    """The stream out was given replicas that keep no token ids (``ReplicaSet(keep_tokens=False)``):
    it sends each block's token ids, and will not send blocks without them."""

    def __init__(self) -> None:
        super().__init__(
            "the stream out sends each block's token ids, but these replicas keep none "
            "(ReplicaSet(keep_tokens=False)): build them with keep_tokens=True"
        )


def _tokens_of(block: ReplicaBlock) -> tuple[int, ...]:
    if block.token_ids is None:
        raise TokenIdsNotKeptError
    return block.token_ids


def _needs_tokens(replicas: ReplicaSet) -> None:
    if not replicas.keeps_tokens:
        raise TokenIdsNotKeptError


def _parent_first(blocks: Iterable[ReplicaBlock]) -> list[ReplicaBlock]:
    by_hash = {block.block_hash: block for block in blocks}
    children: dict[int | None, list[ReplicaBlock]] = {}
    for block in by_hash.values():
        parent = block.parent_block_hash if block.parent_block_hash in by_hash else None
        children.setdefault(parent, []).append(block)
    ordered: list[ReplicaBlock] = []
    stack = sorted(children.get(None, []), key=lambda b: b.block_hash, reverse=True)
    while stack:
        block = stack.pop()
        ordered.append(block)
        stack.extend(
            sorted(children.get(block.block_hash, []), key=lambda b: b.block_hash, reverse=True)
        )
    return ordered


def _tier_stores(
    tiers: Mapping[str, Sequence[int]], on_gpu: Mapping[int, ReplicaBlock]
) -> list[Event]:
    stores: list[Event] = []
    for medium, hashes in tiers.items():
        for block_hash in hashes:
            held = on_gpu.get(block_hash)
            if held is None:
                stores.append(BlockStored((block_hash,), None, (), 0, medium=medium))
                continue
            parent, tokens = held.parent_block_hash, _tokens_of(held)
            stores.append(BlockStored((block_hash,), parent, tokens, len(tokens), None, medium))
    return stores


def source_state(
    source: str,
    blocks: Iterable[ReplicaBlock],
    ts: float,
    meta: BatchMeta | None = None,
    tiers: Mapping[str, Sequence[int]] | None = None,
) -> EventBatch:
    """One source's blocks as a batch: a clear, a store per block (parent first), the
    tombstoned ones as one ``BlockSWAEvicted``, then the stores of each lower tier in ``tiers``
    (medium -> block hashes; see the module docs); ``meta`` says its page size and window.
    ``TokenIdsNotKeptError`` for a block without token ids."""
    events: list[Event] = [AllBlocksCleared()]
    tombstoned: list[int] = []
    ordered = _parent_first(blocks)
    for block in ordered:
        tokens = _tokens_of(block)
        events.append(
            BlockStored((block.block_hash,), block.parent_block_hash, tokens, len(tokens))
        )
        if not block.swa_resident:
            tombstoned.append(block.block_hash)
    if tombstoned:  # the stream's tombstone policy decides what a consumer hears of them
        events.append(BlockSWAEvicted(tuple(tombstoned)))
    if tiers:
        events.extend(_tier_stores(tiers, {block.block_hash: block for block in ordered}))
    return EventBatch(source, "", 0, ts, tuple(events), meta=meta)


def _says_token_ids(meta: BatchMeta | None) -> bool:
    """Whether a source's meta leaves its stores their token ids (not a token-free source)."""
    return meta is None or meta.token_ids


def _meta(meta: BatchMeta | None) -> BatchMeta | None:
    if meta is None:
        return None
    return BatchMeta(page_size=meta.page_size, sliding_window_size=meta.sliding_window_size)


def state_batches(replicas: ReplicaSet, ts: float | None = None) -> list[EventBatch]:
    """Every source of ``replicas`` that holds blocks as one batch (``source_state``), in name
    order (a source holding nothing has nothing to say: engines start empty), token-free
    sources left out (see the module docs); ``TokenIdsNotKeptError`` when ``replicas`` keeps no
    token ids."""
    _needs_tokens(replicas)
    now = time.time() if ts is None else ts
    batches = (
        source_state(
            s,
            replicas[s].blocks(),
            now,
            _meta(replicas.meta_of(s)),
            {medium: replicas[s].tier_blocks(medium) for medium in replicas[s].tiers()},
        )
        for s in sorted(replicas.sources())
        if _says_token_ids(replicas.meta_of(s))
    )
    return [batch for batch in batches if len(batch.events) > 1]


def follower_state(offset: int, replicas: ReplicaSet) -> StreamStart:
    """A run that starts at the follower's log ``offset`` (partition 0) with its replicas'
    state; call it where the two agree (between two applied records)."""
    return StreamStart(offset, tuple(state_batches(replicas)))


def follower_capture(
    restored: Callable[[], bool], offset: Callable[[], int], replicas: ReplicaSet
) -> Callable[[], tuple[int, list[EventBatch]] | None]:
    """The ``StateCapture`` of a snapshot socket: None until ``restored()``, then the
    follower's log ``offset()`` and its replicas' state, read together;
    ``TokenIdsNotKeptError`` at once when ``replicas`` keeps no token ids."""
    _needs_tokens(replicas)

    def capture() -> tuple[int, list[EventBatch]] | None:
        if not restored():
            return None
        return offset(), state_batches(replicas)

    return capture


def replica_lookup(replicas: ReplicaSet) -> BlockLookup:
    """The ``BlockLookup`` of a follower's replicas: a held block's parent and tokens;
    ``TokenIdsNotKeptError`` at once when ``replicas`` keeps no token ids."""
    _needs_tokens(replicas)

    def lookup(source: str, block_hash: int) -> tuple[int | None, tuple[int, ...]] | None:
        tree = replicas.get(source)
        if tree is None or block_hash not in tree:
            return None
        block = tree.block(block_hash)
        return block.parent_block_hash, _tokens_of(block)

    return lookup
