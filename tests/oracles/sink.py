"""The pure-Python twin of the native recorder: events and the digest, made on the spot.

``ReferenceSink`` is what the tree's recording sink was before the native core: every store is
hashed at once onto its parent's chain (``tests.oracles.hashing``), one ``BlockStored``
is built per page, and the state digest (``tests.oracles.digest``) moves by one term per
page changed. It is the readable reference and the test oracle of ``RecorderSink``: differential
tests run one tree into both and compare events, digests and snapshots. It is never chosen at
run time. ``attach_reference`` tees a fresh tree's changes into a twin.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Final

from cache.events import (
    REMOVED_EVICTED,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
)
from cache.events.recorder import EventRecorder
from cache.tree.node import TreeNode
from cache.tree.sink import EventSink
from tests.oracles.digest import block_term
from tests.oracles.hashing import block_hashes_of, chain_page_digests, namespace_prior

if TYPE_CHECKING:
    from cache.tree.radix_cache import SWARadixCache

_MASK: Final = (1 << 64) - 1


class ReferenceSink:
    """Hashes, builds events and keeps the digest as each change happens (a test oracle)."""

    def __init__(self, page_size: int) -> None:
        self._page_size = page_size
        self._events: list[Event] = []
        self._digest = 0
        self._roots: dict[int, tuple[TreeNode, bytes]] = {}
        self._digests: dict[int, list[bytes]] = {}
        self._hashes: dict[int, list[int]] = {}

    @property
    def recorder(self) -> EventRecorder | None:
        """No native recorder behind the reference."""
        return None

    def _chain_end(self, parent: TreeNode) -> tuple[bytes, int | None]:
        """What a child of ``parent`` chains onto: (prior digest, parent block hash)."""
        root = self._roots.get(parent.node_id)
        if root is not None:
            return root[1], None
        return self._digests[parent.node_id][-1], self._hashes[parent.node_id][-1]

    def _parents(self, node: TreeNode) -> list[int | None]:
        """The parent block hash of each of ``node``'s pages."""
        assert node.parent is not None
        hashes = self._hashes[node.node_id]
        return [self._chain_end(node.parent)[1], *hashes[:-1]]

    def _account(self, node: TreeNode, resident: bool, sign: int) -> None:
        hashes = self._hashes[node.node_id]
        for block_hash, parent in zip(hashes, self._parents(node), strict=True):
            self._digest = (self._digest + sign * block_term(block_hash, parent, resident)) & _MASK

    def root(self, node: TreeNode, extra_key: str | None) -> None:
        """Remember a namespace root and its chain prior."""
        self._roots[node.node_id] = (node, namespace_prior(extra_key))

    def stored(self, node: TreeNode, ids: array[int], start: int) -> None:
        """Hash the node's pages onto its parent's chain; one BlockStored per page (from the
        node's own tokens: ``ids`` is the native sink's)."""
        assert node.parent is not None, "a namespace root is never stored"
        prior, parent_hash = self._chain_end(node.parent)
        tokens = node.token_ids
        size = self._page_size
        digests = chain_page_digests(prior, tokens, size)
        hashes = block_hashes_of(digests)
        self._digests[node.node_id] = digests
        self._hashes[node.node_id] = hashes
        self._account(node, True, +1)
        parents = [parent_hash, *hashes[:-1]]
        for index, (block_hash, parent) in enumerate(zip(hashes, parents, strict=True)):
            page = tokens[index * size : (index + 1) * size]
            self._events.append(BlockStored((block_hash,), parent, page, size))

    def removed(self, node: TreeNode) -> None:
        """One BlockRemoved with all the node's pages."""
        self._account(node, not node.swa_tombstone, -1)
        hashes = self._hashes.pop(node.node_id)
        del self._digests[node.node_id]
        self._events.append(BlockRemoved(tuple(hashes), reason=REMOVED_EVICTED))

    def swa_evicted(self, node: TreeNode) -> None:
        """BlockSWAEvicted; the node's terms flip to non-resident."""
        self._account(node, True, -1)
        self._account(node, False, +1)
        self._events.append(BlockSWAEvicted(tuple(self._hashes[node.node_id])))

    def swa_restored(self, node: TreeNode) -> None:
        """BlockSWARestored; the node's terms flip to resident."""
        self._account(node, False, -1)
        self._account(node, True, +1)
        self._events.append(BlockSWARestored(tuple(self._hashes[node.node_id])))

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """Hand the first ``prefix_pages`` pages' digests and hashes to ``prefix``; no event."""
        k = prefix_pages
        digests, hashes = self._digests[suffix.node_id], self._hashes[suffix.node_id]
        self._digests[prefix.node_id], self._digests[suffix.node_id] = digests[:k], digests[k:]
        self._hashes[prefix.node_id], self._hashes[suffix.node_id] = hashes[:k], hashes[k:]

    def cleared(self) -> None:
        """AllBlocksCleared; every node and root is forgotten and the digest is zero."""
        self._digest = 0
        self._roots.clear()
        self._digests.clear()
        self._hashes.clear()
        self._events.append(AllBlocksCleared())

    def take(self) -> list[Event]:
        """The events recorded since the last call."""
        events, self._events = self._events, []
        return events

    def digest_value(self) -> int:
        """The digest accumulator of every page in the tree."""
        return self._digest

    def block_hashes(self, node: TreeNode) -> list[int] | None:
        """The hashes kept for ``node``'s pages."""
        hashes = self._hashes.get(node.node_id)
        return None if hashes is None else list(hashes)

    def snapshot(self) -> list[Event]:
        """The tree as events: BlockStored per page, parents first (roots by id, then children
        by id, depth first), then a BlockSWAEvicted per tombstoned node in the same order."""
        stored: list[Event] = []
        tombstones: list[Event] = []
        size = self._page_size
        for root_id in sorted(self._roots):
            stack = sorted(self._roots[root_id][0].children.values(), key=_by_id_descending)
            while stack:
                node = stack.pop()
                hashes = self._hashes[node.node_id]
                tokens = node.token_ids
                for index, (block_hash, parent) in enumerate(
                    zip(hashes, self._parents(node), strict=True)
                ):
                    page = tokens[index * size : (index + 1) * size]
                    stored.append(BlockStored((block_hash,), parent, page, size))
                if node.swa_tombstone:
                    tombstones.append(BlockSWAEvicted(tuple(hashes)))
                stack.extend(sorted(node.children.values(), key=_by_id_descending))
        return stored + tombstones


def _by_id_descending(node: TreeNode) -> int:
    return -node.node_id


class TeeSink:
    """Passes every change to ``primary`` and to ``twin``; reads come from ``primary``."""

    def __init__(self, primary: EventSink, twin: ReferenceSink) -> None:
        self.primary = primary
        self.twin = twin

    @property
    def recorder(self) -> EventRecorder | None:
        """The primary's recorder."""
        return self.primary.recorder

    def root(self, node: TreeNode, extra_key: str | None) -> None:
        """Both record the root."""
        self.primary.root(node, extra_key)
        self.twin.root(node, extra_key)

    def stored(self, node: TreeNode, ids: array[int], start: int) -> None:
        """Both record the store."""
        self.primary.stored(node, ids, start)
        self.twin.stored(node, ids, start)

    def removed(self, node: TreeNode) -> None:
        """Both record the removal."""
        self.primary.removed(node)
        self.twin.removed(node)

    def swa_evicted(self, node: TreeNode) -> None:
        """Both record the tombstoning."""
        self.primary.swa_evicted(node)
        self.twin.swa_evicted(node)

    def swa_restored(self, node: TreeNode) -> None:
        """Both record the restore."""
        self.primary.swa_restored(node)
        self.twin.swa_restored(node)

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """Both record the split."""
        self.primary.split(prefix, suffix, prefix_pages)
        self.twin.split(prefix, suffix, prefix_pages)

    def cleared(self) -> None:
        """Both record the clear."""
        self.primary.cleared()
        self.twin.cleared()

    def take(self) -> list[Event]:
        """The primary's events."""
        return self.primary.take()

    def digest_value(self) -> int | None:
        """The primary's digest."""
        return self.primary.digest_value()

    def snapshot(self) -> list[Event] | None:
        """The primary's snapshot."""
        return self.primary.snapshot()

    def block_hashes(self, node: TreeNode) -> list[int] | None:
        """The primary's hashes."""
        return self.primary.block_hashes(node)


def attach_reference(cache: SWARadixCache) -> ReferenceSink:
    """Give a fresh ``cache`` (nothing inserted yet) a reference twin that sees every change
    from now on, as if it had been its sink from the start (for differential tests)."""
    state = cache._state
    if any(root.children for root in state.roots.values()):
        raise ValueError("attach_reference needs a fresh cache: this one holds nodes already")
    twin = ReferenceSink(state.page_size)
    twin.cleared()
    for extra_key, root in state.roots.items():
        twin.root(root, extra_key)
    state.sink = TeeSink(state.sink, twin)
    return twin
