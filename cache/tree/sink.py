"""Where the tree's mutations go: a recording sink (events + state digest) or a null sink.

The tree calls the sink at every block-level change; with events disabled it gets the null sink,
so no hashing, event building or digest work happens and no ``if enabled`` tests are scattered
through the tree. The recording sink keeps each node's per-page digests, block hashes and digest
terms on the node, so a split just slices them and a removal never rehashes.
"""

from __future__ import annotations

from typing import Final, Protocol

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    block_term,
    chain_page_digests,
)
from cache.events.build import block_hashes_fast, build_stored
from cache.tree.node import TreeNode

_MASK: Final = (1 << 64) - 1


def first_parent_hash(node: TreeNode) -> int | None:
    """The block hash the node's first page chains onto (None at a namespace root)."""
    parent = node._parent
    assert parent is not None, "a namespace root has no pages"
    return parent.hashes[-1] if parent.hashes else None


def page_terms(node: TreeNode, swa_resident: bool) -> list[int]:
    """The digest term of each page of ``node`` in residency ``swa_resident``."""
    hashes = node.hashes
    parents = [first_parent_hash(node), *hashes[:-1]]
    return [block_term(h, p, swa_resident) for h, p in zip(hashes, parents, strict=True)]


class EventSink(Protocol):
    """Receives every block-level change of the tree."""

    def stored(self, node: TreeNode) -> None:
        """``node`` was linked into the tree with all its pages SWA-resident."""

    def removed(self, node: TreeNode) -> None:
        """``node`` (all its pages) is about to leave the tree."""

    def swa_evicted(self, node: TreeNode) -> None:
        """``node`` was tombstoned."""

    def swa_restored(self, node: TreeNode) -> None:
        """``node`` got SWA KV again."""

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """``suffix`` was split; ``prefix`` took its first ``prefix_pages`` pages."""

    def cleared(self) -> None:
        """Every block was dropped."""

    def take(self) -> list[Event]:
        """The events recorded since the last call."""
        ...

    def digest_value(self) -> int | None:
        """The maintained digest accumulator, or None when this sink keeps none."""
        ...


class NullSink:
    """Events disabled: nothing is hashed, recorded or digested."""

    def stored(self, node: TreeNode) -> None:
        """Ignore a store."""

    def removed(self, node: TreeNode) -> None:
        """Ignore a removal."""

    def swa_evicted(self, node: TreeNode) -> None:
        """Ignore a tombstoning."""

    def swa_restored(self, node: TreeNode) -> None:
        """Ignore a restore."""

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """Ignore a split."""

    def cleared(self) -> None:
        """Ignore a clear."""

    def take(self) -> list[Event]:
        """Always empty."""
        return []

    def digest_value(self) -> int | None:
        """No digest is maintained."""
        return None


class RecordingSink:
    """Builds DESIGN §4 events and keeps the state digest.

    Digest terms are computed lazily: a stored node waits in ``_pending`` until the digest is
    read, so pages that come and go between two reads never pay for their terms. Each read
    folds the pending nodes in with their residency at that moment, which is what the eager
    sum would hold.
    """

    __slots__ = ("_digest", "_events", "_page_size", "_pending")

    def __init__(self, page_size: int) -> None:
        self._page_size = page_size
        self._events: list[Event] = []
        self._digest = 0
        self._pending: dict[int, TreeNode] = {}

    def stored(self, node: TreeNode) -> None:
        """Hash the node's pages onto its parent's chain and record one BlockStored per page."""
        parent = node._parent
        assert parent is not None, "a namespace root is never stored"
        tokens = node._token_ids
        digests = chain_page_digests(parent.digests[-1], tokens, self._page_size)
        hashes = block_hashes_fast(digests)
        node.digests = digests
        node.hashes = hashes
        node.terms = []
        self._pending[node.node_id] = node
        parents = [parent.hashes[-1] if parent.hashes else None, *hashes[:-1]]
        self._events.extend(build_stored(hashes, parents, tokens, self._page_size))

    def removed(self, node: TreeNode) -> None:
        """Record one BlockRemoved with all the node's pages."""
        if self._pending.pop(node.node_id, None) is None:
            self._digest = (self._digest - sum(node.terms)) & _MASK
        self._events.append(BlockRemoved(tuple(node.hashes)))

    def _flip(self, node: TreeNode, swa_resident: bool) -> None:
        if node.node_id in self._pending:
            return  # its terms are computed at the next read, with the residency then
        terms = page_terms(node, swa_resident)
        self._digest = (self._digest + sum(terms) - sum(node.terms)) & _MASK
        node.terms = terms

    def swa_evicted(self, node: TreeNode) -> None:
        """Record BlockSWAEvicted and flip the node's terms to non-resident."""
        self._flip(node, False)
        self._events.append(BlockSWAEvicted(tuple(node.hashes)))

    def swa_restored(self, node: TreeNode) -> None:
        """Record BlockSWARestored and flip the node's terms to resident."""
        self._flip(node, True)
        self._events.append(BlockSWARestored(tuple(node.hashes)))

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """Hand the first ``prefix_pages`` pages' hashes to ``prefix``; no event."""
        k = prefix_pages
        prefix.digests, suffix.digests = suffix.digests[:k], suffix.digests[k:]
        prefix.hashes, suffix.hashes = suffix.hashes[:k], suffix.hashes[k:]
        if suffix.node_id in self._pending:
            self._pending[prefix.node_id] = prefix
        else:
            prefix.terms, suffix.terms = suffix.terms[:k], suffix.terms[k:]

    def cleared(self) -> None:
        """Record AllBlocksCleared and zero the digest."""
        self._digest = 0
        self._pending = {}
        self._events.append(AllBlocksCleared())

    def take(self) -> list[Event]:
        """The events recorded since the last call."""
        events, self._events = self._events, []
        return events

    def digest_value(self) -> int | None:
        """The digest accumulator of every page in the tree (folds pending terms in first)."""
        for node in self._pending.values():
            node.terms = page_terms(node, not node._tombstone)
            self._digest = (self._digest + sum(node.terms)) & _MASK
        self._pending = {}
        return self._digest
