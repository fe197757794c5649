"""``insert``: add a key's new tail, free duplicate slots, restore tombstones from fresh slots."""

from __future__ import annotations

from array import array

import torch

from cache.tree.keys import shared_length
from cache.tree.node import TreeNode
from cache.tree.state import TreeState


def _take_cached(
    state: TreeState, root: TreeNode, key: tuple[int, ...], value: torch.Tensor, prev: int
) -> tuple[TreeNode, int, list[torch.Tensor]]:
    """Walk the cached part of ``key``; restore tombstones past ``prev`` from ``value``.

    Recency as sglang's insert gives it: each node walked becomes the most recent as it is
    reached (so deeper nodes end up more recent), a split puts its prefix then its suffix in
    front, and a restored node enters the SWA list as its most recent.

    Returns the deepest node reached, the cached length, and the incoming slots that duplicate
    resident cached tokens (to be freed).
    """
    duplicates: list[torch.Tensor] = []
    node, pos, end = root, 0, len(key)
    while pos < end:
        child = node._children.get(state.child_key(key, pos))
        if child is None:
            break
        state.touch_node(child)
        length = len(child._token_ids)
        matched = shared_length(child._token_ids, key, pos, state.page_size)
        shared = matched
        if pos < prev < pos + shared:
            shared = prev - pos  # keep the caller's boundary on a node boundary
        if shared < length:
            child = state.split(child, shared)
        if pos >= prev:
            segment = value[pos : pos + shared]
            if child._tombstone:
                state.restore(child, segment)
            else:
                duplicates.append(segment)
        node, pos = child, pos + shared
        if shared == matched < length:
            break
    return node, pos, duplicates


def insert(
    state: TreeState,
    root: TreeNode,
    key: tuple[int, ...],
    ids: array[int],
    value: torch.Tensor,
    prev_prefix_len: int,
) -> int:
    """Insert page-aligned ``key`` (``ids``: the same ids as ``array("I")``) with slots ``value``;
    return the length already cached.

    ``value[:prev_prefix_len]`` are the tree's own slots (from an earlier match); the tree takes
    ownership of the rest: duplicates of cached resident tokens are freed, slots matching a
    tombstoned node give it back its SWA KV, and the uncached tail becomes a new leaf.
    """
    node, pos, duplicates = _take_cached(state, root, key, value, prev_prefix_len)
    if pos < prev_prefix_len:  # nothing was restored or freed: those happen only past it
        raise ValueError(
            f"insert: prev_prefix_len={prev_prefix_len} but only {pos} tokens of the key are "
            "cached; lock the match_prefix result until its insert"
        )
    if duplicates:
        state.allocator.free(torch.cat(duplicates), whole_pages=True)
    if pos < len(key):
        state.add_leaf(node, key[pos:], value[pos : len(key)].clone(), ids, pos)
    return pos
