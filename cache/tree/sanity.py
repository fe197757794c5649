"""``sanity_check``: every structural, accounting and pool invariant of the tree, recomputed."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from cache.errors import SanityError
from cache.tree.node import TreeNode
from cache.tree.state import TreeState
from cache.tree.walk import walk_blocks

__all__ = ["SanityError", "sanity_check"]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SanityError(message)


def _nodes(state: TreeState) -> Iterator[TreeNode]:
    for root in state.roots.values():
        stack = list(root._children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node._children.values())


def _check_node(state: TreeState, node: TreeNode) -> None:
    parent = node._parent
    _require(parent is not None, f"{node!r} has no parent")
    assert parent is not None
    tokens = node._token_ids
    _require(len(tokens) > 0 and len(tokens) % state.page_size == 0, f"{node!r}: bad length")
    _require(node._value.numel() == len(tokens), f"{node!r}: value length != token count")
    _require(parent._children.get(state.child_key(tokens, 0)) is node, f"{node!r}: bad link")
    _require(node.full_lock_ref >= node.swa_lock_ref >= 0, f"{node!r}: lock counts")
    child_locks = sum(c.full_lock_ref for c in node._children.values())
    _require(node.full_lock_ref >= child_locks, f"{node!r}: fewer locks than its children")
    if node._tombstone:
        _require(node.swa_lock_ref == 0, f"{node!r}: an SWA-locked tombstone")
        # Stricter than "no unlocked tombstoned leaf": a locked leaf is SWA-locked, so never one.
        _require(bool(node._children), f"{node!r}: a tombstoned leaf")
    _require(state.full_lru.contains(node), f"{node!r}: missing from the full LRU list")
    _require(state.swa_lru.contains(node) != node._tombstone, f"{node!r}: SWA LRU membership")


def _check_sizes(state: TreeState, nodes: list[TreeNode]) -> None:
    sizes = {"full_evictable": 0, "full_protected": 0, "swa_evictable": 0, "swa_protected": 0}
    for node in nodes:
        n = len(node._token_ids)
        sizes["full_protected" if node.full_lock_ref else "full_evictable"] += n
        if not node._tombstone:
            sizes["swa_protected" if node.swa_lock_ref else "swa_evictable"] += n
    for name, expected in sizes.items():
        actual = getattr(state, name)
        _require(actual == expected, f"{name} is {actual}, the nodes add up to {expected}")
    _require(state.full_lru.check_links() == len(nodes), "full LRU size != node count")
    resident = sum(1 for node in nodes if not node._tombstone)
    _require(state.swa_lru.check_links() == resident, "SWA LRU size != resident node count")
    top_locks = sum(c.full_lock_ref for r in state.roots.values() for c in r._children.values())
    _require(top_locks == state.live_locks, f"{top_locks} top-level locks, {state.live_locks} live")


def _check_hashes(state: TreeState) -> None:
    for item in walk_blocks(state.roots.items(), state.page_size):
        held = state.sink.block_hashes(item.node)
        if held is not None:
            _require(held == item.hashes, f"{item.node!r}: the sink's block hashes are stale")


def _check_pools(
    state: TreeState, nodes: list[TreeNode], caller_full: int | None, caller_swa: int | None
) -> None:
    alloc = state.allocator
    alloc.sanity_check()
    ps = state.page_size
    values = [n._value for n in nodes]
    held = torch.cat(values) if values else state.empty_value
    _require(torch.unique(held).numel() == held.numel(), "a slot is held by two nodes")
    full_held, _ = alloc.held_masks()
    _require(bool(full_held[held // ps].all()), "the tree holds a slot the full pool calls free")
    for node in nodes:
        swa = alloc.translate_full_to_swa(node._value)
        mapped = bool((swa != 0).all()) if not node._tombstone else not bool(swa.any())
        _require(mapped, f"{node!r}: SWA mapping disagrees with its tombstone flag")
    tree_full = held.numel()
    tree_swa = sum(len(n._token_ids) for n in nodes if not n._tombstone)
    for pool, free, tree, caller, total in (
        ("full", alloc.full_available_size(), tree_full, caller_full, alloc.full_size),
        ("swa", alloc.swa_available_size(), tree_swa, caller_swa, alloc.swa_size),
    ):
        if caller is None:
            _require(free + tree <= total, f"{pool}: free {free} + tree {tree} > total {total}")
        else:
            _require(
                free + tree + caller == total,
                f"{pool}: free {free} + tree {tree} + callers {caller} != total {total}",
            )


def sanity_check(
    state: TreeState, check_hashes: bool, caller_full: int | None, caller_swa: int | None
) -> None:
    """Raise SanityError on any broken invariant; ``check_hashes``: compare stored hashes."""
    nodes = list(_nodes(state))
    for node in nodes:
        _check_node(state, node)
    _check_sizes(state, nodes)
    if check_hashes:
        _check_hashes(state)
    _check_pools(state, nodes, caller_full, caller_swa)
