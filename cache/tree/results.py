"""Plain results of tree operations: eviction counts, prefix matches and lock handles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from cache.tree.node import TreeNode


@dataclass(frozen=True, slots=True)
class EvictResult:
    """Slots one ``evict`` call freed, per pool, as sglang counts them (whole nodes, so may
    exceed the asks). ``full_evicted`` leaves out the tombstoned ancestors an SWA-phase leaf
    deletion takes with it (sglang 0.5.16 does); the pools get those slots back all the same."""

    full_evicted: int
    swa_evicted: int


@dataclass(frozen=True, slots=True)
class MatchResult:
    """A cached prefix: its full-pool ``indices`` and the node the match ends at."""

    indices: torch.Tensor
    last_node: TreeNode


@dataclass(frozen=True, slots=True)
class LockHandle:
    """Proof of one ``inc_lock_ref``: pass it back to ``dec_lock_ref`` with the same node.

    ``swa_locked_tokens`` is how many tokens at the end of the path carry the SWA lock (the
    window rounded up to pages, or the whole path if shorter); splits keep path lengths, so this
    stays exact. ``generation`` ties the handle to the tree state before any ``reset``.
    """

    node: TreeNode
    swa_locked_tokens: int
    generation: int
