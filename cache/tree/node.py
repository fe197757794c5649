"""The radix tree node: a run of page-aligned tokens with its KV slots, locks and LRU links."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import torch

ChildKey: TypeAlias = int | tuple[int, ...]

FULL: int = 0
"""Index of the full-pool LRU list in a node's link pairs."""
SWA: int = 1
"""Index of the SWA-pool LRU list in a node's link pairs."""


class TreeNode:
    """One node of ``SWARadixCache``; the public attributes are read-only views.

    Invariant: the structural fields ``_token_ids``, ``_value``, ``_parent``, ``_children``
    and ``_tombstone`` are package-internal to ``cache.tree``. Only ``state.TreeState`` changes
    them (new node, split, tombstone / revive, delete), so a parent's ``_children`` key is always
    its child's first token (page size 1) or first page and every structural change passes
    through one class; the other ``cache.tree`` modules read them directly (a slot read, about
    6x cheaper than the property, on the match / insert / evict walks); code outside
    ``cache.tree`` reads ``token_ids``, ``value``, ``swa_tombstone``, ``parent`` and
    ``children``. ``tests/cache/test_tree_node_fields.py`` holds both rules. Lock counts are
    changed by ``TreeState``, LRU links by ``lru``, and the per-page hashes by ``sink``.
    """

    __slots__ = (
        "_children",
        "_parent",
        "_token_ids",
        "_tombstone",
        "_value",
        "full_lock_ref",
        "lru_next",
        "lru_prev",
        "node_id",
        "swa_lock_ref",
    )

    def __init__(
        self,
        node_id: int,
        token_ids: tuple[int, ...],
        value: torch.Tensor,
        parent: TreeNode | None,
    ) -> None:
        self.node_id = node_id
        self._token_ids = token_ids
        self._value = value
        self._parent = parent
        self._children: dict[ChildKey, TreeNode] = {}
        self._tombstone = False
        self.full_lock_ref = 0
        self.swa_lock_ref = 0
        self.lru_prev: list[TreeNode | None] = [None, None]
        self.lru_next: list[TreeNode | None] = [None, None]

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The node's tokens (a whole number of pages)."""
        return self._token_ids

    @property
    def value(self) -> torch.Tensor:
        """Full-pool slot indices, one per token."""
        return self._value

    @property
    def swa_tombstone(self) -> bool:
        """True when the node's SWA KV was freed while its full KV is kept."""
        return self._tombstone

    @property
    def parent(self) -> TreeNode | None:
        """The parent node (None for a namespace root)."""
        return self._parent

    @property
    def children(self) -> Mapping[ChildKey, TreeNode]:
        """Children keyed by their first token (page size 1) or first page."""
        return self._children

    @property
    def is_root(self) -> bool:
        """True for a namespace root (holds no tokens, never evicted)."""
        return self._parent is None

    def __repr__(self) -> str:
        state = "tombstone" if self._tombstone else "live"
        return (
            f"TreeNode(id={self.node_id}, tokens={len(self._token_ids)}, {state}, "
            f"locks={self.full_lock_ref}/{self.swa_lock_ref}, children={len(self._children)})"
        )
