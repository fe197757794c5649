"""``match_prefix``: the longest cached prefix usable under the sliding-window rule."""

from __future__ import annotations

import math

import torch

from cache.tree.keys import shared_length
from cache.tree.node import TreeNode
from cache.tree.results import MatchResult
from cache.tree.state import TreeState


def walk_match(
    state: TreeState, root: TreeNode, key: tuple[int, ...]
) -> tuple[list[torch.Tensor], int, TreeNode]:
    """Walk ``key`` from ``root``, splitting on a partial match.

    Returns the value tensors of the walked nodes, how many of them form the deepest SWA-valid
    prefix, and the node that prefix ends at. A match may end at a boundary only if no tombstone
    precedes it on the path, or at least ``window`` resident tokens follow the last tombstone.
    """
    window = state.window
    values: list[torch.Tensor] = []
    since = math.inf  # resident tokens since the last tombstone; inf: none seen yet
    best_count, best_node = 0, root
    node, pos, end = root, 0, len(key)
    while pos < end:
        child = node._children.get(state.child_key(key, pos))
        if child is None:
            break
        if child._tombstone:
            if since >= window:
                best_count, best_node = len(values), node
            since = 0
        length = len(child._token_ids)
        shared = shared_length(child._token_ids, key, pos, state.page_size)
        if shared < length:
            child = state.split(child, shared)
        values.append(child._value)
        if not child._tombstone:
            since += shared
        node, pos = child, pos + shared
        if shared < length:
            break
    if since >= window:
        best_count, best_node = len(values), node
    return values, best_count, best_node


def match_prefix(state: TreeState, root: TreeNode, key: tuple[int, ...]) -> MatchResult:
    """The SWA-valid cached prefix of ``key``; refreshes the recency of its path."""
    values, count, node = walk_match(state, root, key)
    if count == 0:
        return MatchResult(state.empty_value, root)
    state.touch(node)
    return MatchResult(torch.cat(values[:count]), node)
