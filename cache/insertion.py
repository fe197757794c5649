"""``insert``: add a key's new tail, free duplicate slots, restore tombstones from fresh slots."""

from __future__ import annotations

import torch

from cache.keys import shared_length
from cache.node import TreeNode
from cache.tree_state import TreeState


def insert(
    state: TreeState,
    root: TreeNode,
    key: tuple[int, ...],
    value: torch.Tensor,
    prev_prefix_len: int,
) -> int:
    """Insert page-aligned ``key`` with slots ``value``; return the length already cached.

    ``value[:prev_prefix_len]`` are the tree's own slots (from an earlier match); the tree takes
    ownership of the rest: duplicates of cached resident tokens are freed, slots matching a
    tombstoned node give it back its SWA KV, and the uncached tail becomes a new leaf.
    """
    duplicates: list[torch.Tensor] = []
    node, pos, end = root, 0, len(key)
    while pos < end:
        child = node._children.get(state.child_key(key, pos))
        if child is None:
            break
        length = len(child._token_ids)
        matched = shared_length(child._token_ids, key, pos, state.page_size)
        shared = matched
        if pos < prev_prefix_len < pos + shared:
            shared = prev_prefix_len - pos  # keep the caller's boundary on a node boundary
        if shared < length:
            child = state.split(child, shared)
        if pos >= prev_prefix_len:
            segment = value[pos : pos + shared]
            if child._tombstone:
                state.restore(child, segment)
            else:
                duplicates.append(segment)
        node, pos = child, pos + shared
        if shared == matched < length:
            break
    if pos < prev_prefix_len:
        raise ValueError(
            f"insert: prev_prefix_len={prev_prefix_len} but only {pos} tokens of the key are "
            "cached; lock the match_prefix result until its insert"
        )
    if duplicates:
        state.allocator.free(torch.cat(duplicates))
    if pos < end:
        node = state.add_leaf(node, key[pos:], value[pos:end].clone())
    state.touch(node)
    return pos
