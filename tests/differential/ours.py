"""Our ``cache.SWARadixCache`` behind the differential step program's adapter protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from cache import LockHandle, SWAKVAllocator, SWARadixCache
from cache.events import AllBlocksCleared, BlockRemoved, BlockStored
from cache.tree.node import TreeNode
from tests.differential.program import Matched
from tests.differential.steps import CacheConfig


def path_boundaries(node: TreeNode) -> list[int]:
    """Where each node on the path root → ``node`` ends, in tokens from the root."""
    lengths: list[int] = []
    while node.parent is not None:
        lengths.append(len(node.token_ids))
        node = node.parent
    ends, total = [], 0
    for length in reversed(lengths):
        total += length
        ends.append(total)
    return ends


class OursCache:
    """Adapter over our cache (events on, CPU)."""

    def __init__(self, config: CacheConfig) -> None:
        self._alloc = SWAKVAllocator(config.full_size, config.swa_size, config.page_size, "cpu")
        self._cache = SWARadixCache(self._alloc, config.window, config.page_size)
        self._page_size = config.page_size
        self._window = config.window

    @property
    def page_size(self) -> int:
        """Tokens per page."""
        return self._page_size

    @property
    def window(self) -> int:
        """The sliding window in tokens."""
        return self._window

    def match(self, tokens: Sequence[int]) -> Matched:
        """``match_prefix``."""
        result = self._cache.match_prefix(list(tokens))
        node = result.last_node
        return Matched(int(result.indices.numel()), result.indices, node, path_boundaries(node))

    def lock(self, node: object) -> object:
        """``inc_lock_ref``."""
        assert isinstance(node, TreeNode)
        return self._cache.inc_lock_ref(node)

    def unlock(self, node: object, lock: object) -> None:
        """``dec_lock_ref``."""
        assert isinstance(node, TreeNode) and isinstance(lock, LockHandle)
        self._cache.dec_lock_ref(node, lock)

    def alloc(self, n: int) -> torch.Tensor | None:
        """``SWAKVAllocator.alloc``."""
        return self._alloc.alloc(n)

    def free(self, slots: torch.Tensor) -> None:
        """``SWAKVAllocator.free``."""
        self._alloc.free(slots)

    def free_swa(self, slots: torch.Tensor) -> None:
        """``SWAKVAllocator.free_swa``."""
        self._alloc.free_swa(slots)

    def insert(self, tokens: Sequence[int], value: torch.Tensor, prev: int) -> int:
        """``insert``."""
        return self._cache.insert(list(tokens), value, prev_prefix_len=prev)

    def evict(self, full: int, swa: int) -> tuple[int, int]:
        """``evict``."""
        result = self._cache.evict(full_tokens=full, swa_tokens=swa)
        return result.full_evicted, result.swa_evicted

    def reset(self) -> None:
        """``reset`` (returns every slot itself)."""
        self._cache.reset()

    def pools(self) -> tuple[int, int]:
        """Available (full, swa) slots."""
        return self._alloc.full_available_size(), self._alloc.swa_available_size()

    def total_size(self) -> tuple[int, int]:
        """``total_size()``."""
        return self._cache.total_size()

    def take_events(self) -> list[list[Any]]:
        """The step's events sglang also emits; our BlockSWAEvicted/Restored are left out."""
        out: list[list[Any]] = []
        for event in self._cache.take_events():
            match event:
                case BlockStored():
                    out.append(
                        [
                            "BlockStored",
                            list(event.block_hashes),
                            event.parent_block_hash,
                            list(event.token_ids),
                            event.block_size,
                            event.lora_id,
                            event.medium,
                        ]
                    )
                case BlockRemoved():
                    out.append(["BlockRemoved", list(event.block_hashes), event.medium])
                case AllBlocksCleared():
                    out.append(["AllBlocksCleared"])
        return out

    def check(self, locks_held: bool) -> None:
        """``sanity_check`` with exact pool accounting (the program holds no slot between steps)."""
        self._cache.sanity_check(caller_held_full=0, caller_held_swa=0)

    def describe(self) -> list[str]:
        """Nodes (path, tombstone, locks) and both LRU lists, most recent first."""
        state = self._cache._state  # test-only introspection of the tree's LRU lists

        def name(node: TreeNode) -> str:
            parts = []
            while node.parent is not None:
                parts.append(",".join(map(str, node.token_ids)))
                node = node.parent
            return "/".join(reversed(parts))

        lines = []
        stack = list(self._cache.root.children.values())
        while stack:
            node = stack.pop()
            tomb = " tombstone" if node.swa_tombstone else ""
            locks = f" locks={node.full_lock_ref}/{node.swa_lock_ref}"
            lines.append(f"node {name(node)}{tomb}{locks}")
            stack.extend(node.children.values())
        lines.append("full LRU: " + " | ".join(name(n) for n in state.full_lru))
        lines.append("swa LRU:  " + " | ".join(name(n) for n in state.swa_lru))
        return sorted(lines[:-2]) + lines[-2:]
