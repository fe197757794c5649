"""``evict``: free full KV from least recent unlocked leaves, SWA KV from least recent nodes."""

from __future__ import annotations

from cache.tree.results import EvictResult
from cache.tree.state import TreeState


def _evict_full(state: TreeState, wanted: int) -> tuple[int, int]:
    """Delete least recent unlocked leaves until ``wanted`` full slots are freed."""
    full = swa = 0
    lru = state.full_lru
    node = lru.oldest_unlocked(leaves_only=True)
    while full < wanted and node is not None:
        after = lru.oldest_unlocked(leaves_only=True, before=node)
        freed_full, freed_swa, parent_is_leaf = state.delete_leaf(node)
        full += freed_full
        swa += freed_swa
        # The new leaf is older than anything scanned so far: rescan from the old end.
        node = lru.oldest_unlocked(leaves_only=True) if parent_is_leaf else after
    return full, swa


def _evict_swa(state: TreeState, wanted: int) -> tuple[int, int]:
    """Tombstone internal, delete leaf, least recent SWA-unlocked nodes first.

    A full-locked leaf is always its lock's own node, so it is SWA-locked too and never seen
    here; no tombstoned leaf can therefore appear.
    """
    full = swa = 0
    lru = state.swa_lru
    node = lru.oldest_unlocked(leaves_only=False)
    while swa < wanted and node is not None:
        after = lru.oldest_unlocked(leaves_only=False, before=node)
        if node._children:
            swa += state.tombstone(node)
        else:
            # As sglang 0.5.16 counts it: the leaf's own tokens, not those of the tombstoned
            # ancestors deleted with it (the pools get all of them back).
            full += len(node._token_ids)
            swa += state.delete_leaf(node)[1]
        node = after
    return full, swa


def evict(state: TreeState, full_tokens: int, swa_tokens: int) -> EvictResult:
    """Free at least the asked slots where unlocked nodes allow; report what was freed.

    The full phase runs first; the SWA slots it freed count toward ``swa_tokens``. The counts
    are sglang 0.5.16's: exact, except that a leaf the SWA phase deletes counts only its own
    tokens as full evicted, not those of the tombstoned ancestors deleted with it.
    """
    if full_tokens < 0 or swa_tokens < 0:
        raise ValueError(f"evict: negative request {full_tokens=} {swa_tokens=}")
    full, swa = _evict_full(state, full_tokens) if full_tokens > 0 else (0, 0)
    if swa < swa_tokens:
        more_full, more_swa = _evict_swa(state, swa_tokens - swa)
        full += more_full
        swa += more_swa
    return EvictResult(full_evicted=full, swa_evicted=swa)
