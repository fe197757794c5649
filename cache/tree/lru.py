"""An intrusive doubly-linked LRU list over tree nodes (one for the full pool, one for SWA).

Head is the most recent end, tail the least recent. Links live on the nodes (``lru_prev`` /
``lru_next`` pairs indexed by the list's ``which``), so moves are O(1) with no allocation.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from cache.tree.node import SWA, TreeNode


def _sentinel() -> TreeNode:
    return TreeNode(-1, (), torch.empty(0, dtype=torch.int64), None)


class LRUList:
    """Nodes ordered by recency; lock-aware scans from the least recent end."""

    __slots__ = ("_head", "_tail", "_which", "size")

    def __init__(self, which: int) -> None:
        self._which = which
        self._head = _sentinel()
        self._tail = _sentinel()
        self._head.lru_next[which] = self._tail
        self._tail.lru_prev[which] = self._head
        self.size = 0

    def _lock_of(self, node: TreeNode) -> int:
        return node.swa_lock_ref if self._which == SWA else node.full_lock_ref

    def contains(self, node: TreeNode) -> bool:
        """True if ``node`` is linked into this list."""
        return node.lru_next[self._which] is not None

    def push_front(self, node: TreeNode) -> None:
        """Link ``node`` (not in the list) as the most recent."""
        self.insert_after(self._head, node)

    def insert_after(self, anchor: TreeNode, node: TreeNode) -> None:
        """Link ``node`` (not in the list) just less recent than ``anchor``."""
        w = self._which
        after = anchor.lru_next[w]
        assert after is not None, "anchor is not in the list"
        node.lru_prev[w] = anchor
        node.lru_next[w] = after
        anchor.lru_next[w] = node
        after.lru_prev[w] = node
        self.size += 1

    def remove(self, node: TreeNode) -> None:
        """Unlink ``node`` (in the list)."""
        w = self._which
        before = node.lru_prev[w]
        after = node.lru_next[w]
        assert before is not None and after is not None, f"{node!r} is not in the list"
        before.lru_next[w] = after
        after.lru_prev[w] = before
        node.lru_prev[w] = None
        node.lru_next[w] = None
        self.size -= 1

    def move_to_front(self, node: TreeNode) -> None:
        """Make ``node`` (in the list) the most recent."""
        if self._head.lru_next[self._which] is not node:
            self.remove(node)
            self.push_front(node)

    def touch_path(self, path: list[TreeNode]) -> None:
        """Make ``path`` (deepest first) the most recent nodes, deepest the most recent of all."""
        w = self._which
        anchor = self._head
        for node in path:
            if node.lru_next[w] is None:  # a tombstone, absent from the SWA list
                continue
            if anchor.lru_next[w] is not node:
                self.remove(node)
                self.insert_after(anchor, node)
            anchor = node

    def oldest_unlocked(self, leaves_only: bool, before: TreeNode | None = None) -> TreeNode | None:
        """The least recent unlocked node (optionally a leaf), more recent than ``before``."""
        w = self._which
        node = (before or self._tail).lru_prev[w]
        lock_of = self._lock_of
        while node is not None and node is not self._head:
            if lock_of(node) == 0 and not (leaves_only and node._children):
                return node
            node = node.lru_prev[w]
        return None

    def __iter__(self) -> Iterator[TreeNode]:
        """Nodes from the most recent to the least recent."""
        w = self._which
        node = self._head.lru_next[w]
        while node is not None and node is not self._tail:
            yield node
            node = node.lru_next[w]

    def check_links(self) -> int:
        """Raise AssertionError on asymmetric links; return the number of linked nodes."""
        w = self._which
        count = 0
        node = self._head
        while node is not self._tail:
            after = node.lru_next[w]
            if after is None or after.lru_prev[w] is not node:
                raise AssertionError(f"LRU list {w}: broken link after {node!r}")
            node = after
            count += 1
        if count - 1 != self.size:
            raise AssertionError(f"LRU list {w}: {count - 1} linked nodes, size says {self.size}")
        return self.size
