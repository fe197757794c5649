"""The mutable core of the SWA radix tree and its block-level primitives.

Everything that changes what the tree holds goes through here (add a leaf, split, tombstone,
restore, delete), so the LRU lists, the size counters, the allocator and the event sink always
move together. The operations (match, insert, locks, eviction) are built on these primitives.
"""

from __future__ import annotations

from array import array

import torch

from cache.allocator import SWAKVAllocator
from cache.tree.lru import LRUList
from cache.tree.node import FULL, SWA, ChildKey, TreeNode
from cache.tree.sink import EventSink


class TreeState:
    """Namespace roots, two LRU lists, size counters, and the sink every change reports to."""

    def __init__(
        self, allocator: SWAKVAllocator, page_size: int, window: int, sink: EventSink
    ) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.window = window
        self.swa_lock_cap = -(-window // page_size) * page_size
        self.sink = sink
        self.empty_value = torch.empty(0, dtype=torch.int64, device=allocator.device)
        self.generation = 0
        self._next_id = 0
        self.live_locks = 0
        self.roots: dict[str | None, TreeNode] = {}
        self.full_lru = LRUList(FULL)
        self.swa_lru = LRUList(SWA)
        self.full_evictable = 0
        self.swa_evictable = 0
        self.full_protected = 0
        self.swa_protected = 0

    def clear(self) -> None:
        """Forget every node (the caller returned their slots) and start a new generation."""
        self.generation += 1
        self.live_locks = 0
        self.roots = {}
        self.full_lru = LRUList(FULL)
        self.swa_lru = LRUList(SWA)
        self.full_evictable = self.swa_evictable = 0
        self.full_protected = self.swa_protected = 0

    # --- nodes ------------------------------------------------------------------------------

    def _new_node(
        self, tokens: tuple[int, ...], value: torch.Tensor, parent: TreeNode | None
    ) -> TreeNode:
        self._next_id += 1
        return TreeNode(self._next_id, tokens, value, parent)

    def root_of(self, extra_key: str | None) -> TreeNode:
        """The root of namespace ``extra_key``, created on first use."""
        root = self.roots.get(extra_key)
        if root is None:
            root = self._new_node((), self.empty_value, None)
            self.roots[extra_key] = root
            self.sink.root(root, extra_key)
        return root

    def child_key(self, tokens: tuple[int, ...], pos: int) -> ChildKey:
        """The key of the child that tokens starting at ``pos`` would live under."""
        if self.page_size == 1:
            return tokens[pos]
        return tokens[pos : pos + self.page_size]

    def add_leaf(
        self,
        parent: TreeNode,
        tokens: tuple[int, ...],
        value: torch.Tensor,
        ids: array[int],
        start: int,
    ) -> TreeNode:
        """Link a new SWA-resident leaf owning ``value`` under ``parent``; ``tokens`` are
        ``ids[start : start + len(tokens)]`` (the sink records them from ``ids``)."""
        node = self._new_node(tokens, value, parent)
        parent._children[self.child_key(tokens, 0)] = node
        self.full_lru.push_front(node)
        self.swa_lru.push_front(node)
        self.full_evictable += len(tokens)
        self.swa_evictable += len(tokens)
        self.sink.stored(node, ids, start)
        return node

    def split(self, node: TreeNode, length: int, *, to_mru: bool = True) -> TreeNode:
        """Split ``node`` after ``length`` tokens; return the new prefix (``node`` keeps the rest).

        The prefix copies the tombstone flag and lock counts (every lock through ``node`` covers
        both parts). Recency, as sglang does it: both parts become the most recent nodes of both
        LRU lists, the prefix first, then the suffix. With ``to_mru=False`` (a split sglang never
        makes: the window-capped lock's) they keep ``node``'s place, prefix just less recent.
        No event.
        """
        parent = node._parent
        assert parent is not None and 0 < length < len(node._token_ids)
        tokens = node._token_ids
        prefix = self._new_node(tokens[:length], node._value[:length], parent)
        prefix._tombstone = node._tombstone
        prefix.full_lock_ref = node.full_lock_ref
        prefix.swa_lock_ref = node.swa_lock_ref
        self.sink.split(prefix, node, length // self.page_size)
        node._token_ids = tokens[length:]
        node._value = node._value[length:]
        node._parent = prefix
        prefix._children[self.child_key(node._token_ids, 0)] = node
        parent._children[self.child_key(tokens, 0)] = prefix
        resident = not node._tombstone
        if to_mru:
            self.full_lru.remove(node)
            self.full_lru.push_front(prefix)
            self.full_lru.push_front(node)
            if resident:
                self.swa_lru.remove(node)
                self.swa_lru.push_front(prefix)
                self.swa_lru.push_front(node)
        else:
            self.full_lru.insert_after(node, prefix)
            if resident:
                self.swa_lru.insert_after(node, prefix)
        return prefix

    # --- SWA residency ----------------------------------------------------------------------

    def tombstone(self, node: TreeNode) -> int:
        """Free the SWA KV of an SWA-unlocked, resident node; return the slots freed."""
        assert not node._tombstone and node.swa_lock_ref == 0
        count = len(node._token_ids)
        self.allocator.free_swa(node._value, swa_resident=True, whole_pages=True)
        self.swa_lru.remove(node)
        node._tombstone = True
        self.swa_evictable -= count
        self.sink.swa_evicted(node)
        return count

    def restore(self, node: TreeNode, incoming: torch.Tensor) -> None:
        """Give a tombstoned node the SWA slots of the fresh full slots ``incoming`` (freed)."""
        assert node._tombstone and node.swa_lock_ref == 0
        self.allocator.move_swa(node._value, incoming)
        node._tombstone = False
        self.swa_lru.push_front(node)
        self.swa_evictable += len(node._token_ids)
        self.sink.swa_restored(node)

    # --- deletion ---------------------------------------------------------------------------

    def _delete(self, node: TreeNode) -> int:
        """Unlink an unlocked leaf and free its slots; return SWA slots freed."""
        parent = node._parent
        assert parent is not None and not node._children and node.full_lock_ref == 0
        count = len(node._token_ids)
        self.sink.removed(node)
        del parent._children[self.child_key(node._token_ids, 0)]
        self.full_lru.remove(node)
        self.full_evictable -= count
        if node._tombstone:
            self.allocator.free(node._value, swa_resident=False, whole_pages=True)
            return 0
        self.swa_lru.remove(node)
        self.swa_evictable -= count
        self.allocator.free(node._value, swa_resident=True, whole_pages=True)
        return count

    def delete_leaf(self, node: TreeNode) -> tuple[int, int, bool]:
        """Delete an unlocked leaf and every tombstoned ancestor that becomes an unlocked leaf.

        Returns (full slots freed, SWA slots freed, whether a non-root parent became a leaf).
        """
        full = swa = 0
        while True:
            full += len(node._token_ids)
            swa += self._delete(node)
            parent = node._parent
            assert parent is not None
            if parent._parent is None or parent._children:
                return full, swa, False
            if not parent._tombstone or parent.full_lock_ref:
                return full, swa, True
            node = parent

    # --- locks ------------------------------------------------------------------------------

    def lock_full(self, node: TreeNode) -> None:
        """Add one full lock to ``node``."""
        if node.full_lock_ref == 0:
            count = len(node._token_ids)
            self.full_evictable -= count
            self.full_protected += count
        node.full_lock_ref += 1

    def unlock_full(self, node: TreeNode) -> None:
        """Drop one full lock from ``node``."""
        node.full_lock_ref -= 1
        if node.full_lock_ref == 0:
            count = len(node._token_ids)
            self.full_evictable += count
            self.full_protected -= count

    def lock_swa(self, node: TreeNode) -> None:
        """Add one SWA lock to a resident ``node``."""
        if node.swa_lock_ref == 0:
            count = len(node._token_ids)
            self.swa_evictable -= count
            self.swa_protected += count
        node.swa_lock_ref += 1

    def unlock_swa(self, node: TreeNode) -> None:
        """Drop one SWA lock from ``node``."""
        node.swa_lock_ref -= 1
        if node.swa_lock_ref == 0:
            count = len(node._token_ids)
            self.swa_evictable += count
            self.swa_protected -= count

    # --- recency ----------------------------------------------------------------------------

    def touch_node(self, node: TreeNode) -> None:
        """Make ``node`` the most recent node of the full list (and of the SWA list if resident)."""
        self.full_lru.move_to_front(node)
        if not node._tombstone:
            self.swa_lru.move_to_front(node)

    def touch(self, node: TreeNode) -> None:
        """Make the path root → ``node`` most recent, nodes nearer the root less recent."""
        path: list[TreeNode] = []
        while node._parent is not None:
            path.append(node)
            node = node._parent
        self.full_lru.touch_path(path)
        self.swa_lru.touch_path(path)
