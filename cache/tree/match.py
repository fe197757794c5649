"""``match_prefix``: the longest cached prefix usable under the sliding-window rule."""

from __future__ import annotations

import torch

from cache.events.swa_rule import usable_prefix
from cache.tree.keys import shared_length
from cache.tree.node import TreeNode
from cache.tree.results import MatchResult
from cache.tree.state import TreeState


def walk_match(state: TreeState, root: TreeNode, key: tuple[int, ...]) -> list[TreeNode]:
    """The nodes ``key`` walks through from ``root``, splitting the last one on a partial match.

    Each node returned holds exactly the tokens of ``key`` it matched.
    """
    nodes: list[TreeNode] = []
    node, pos, end = root, 0, len(key)
    while pos < end:
        child = node._children.get(state.child_key(key, pos))
        if child is None:
            break
        length = len(child._token_ids)
        shared = shared_length(child._token_ids, key, pos, state.page_size)
        if shared < length:
            child = state.split(child, shared)
        nodes.append(child)
        node, pos = child, pos + shared
        if shared < length:
            break
    return nodes


def match_prefix(state: TreeState, root: TreeNode, key: tuple[int, ...]) -> MatchResult:
    """The SWA-valid cached prefix of ``key``; refreshes the recency of its path."""
    nodes = walk_match(state, root, key)
    segments = ((len(n._token_ids), not n._tombstone) for n in nodes)
    _, count = usable_prefix(segments, state.window)
    if count == 0:
        return MatchResult(state.empty_value, root)
    node = nodes[count - 1]
    state.touch(node)
    return MatchResult(torch.cat([n._value for n in nodes[:count]]), node)
