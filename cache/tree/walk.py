"""Whole-tree walks: every page's hashes (recomputed), snapshot events and the digest from scratch.

These never trust what the sink holds, so ``sanity_check`` can compare the two and a tree with
events disabled can still report its digest and its snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cache.events import (
    BlockStored,
    BlockSWAEvicted,
    Event,
    StateDigest,
    block_hashes_of,
    chain_page_digests,
    namespace_prior,
)
from cache.tree.node import TreeNode


@dataclass(frozen=True, slots=True)
class NodeBlocks:
    """One node with its recomputed per-page block hashes and the hash its first page chains to."""

    node: TreeNode
    hashes: list[int]
    parent_hash: int | None


def walk_blocks(
    roots: Iterable[tuple[str | None, TreeNode]], page_size: int
) -> Iterator[NodeBlocks]:
    """Every non-root node with its hashes recomputed from the tokens, parents first: namespace
    roots in the order given, then depth first with children in creation (node id) order, the
    order the native recorder's snapshot has too."""
    for extra_key, root in roots:
        stack: list[tuple[TreeNode, bytes, int | None]] = [
            (child, namespace_prior(extra_key), None) for child in _children_last_first(root)
        ]
        while stack:
            node, prior, parent_hash = stack.pop()
            digests = chain_page_digests(prior, node._token_ids, page_size)
            hashes = block_hashes_of(digests)
            yield NodeBlocks(node, hashes, parent_hash)
            stack.extend((child, digests[-1], hashes[-1]) for child in _children_last_first(node))


def _children_last_first(node: TreeNode) -> list[TreeNode]:
    """``node``'s children, newest first, so a stack pops the oldest first."""
    return sorted(node._children.values(), key=lambda child: -child.node_id)


def snapshot_events(roots: Iterable[tuple[str | None, TreeNode]], page_size: int) -> list[Event]:
    """The tree as events, recomputed: BlockStored per page (parents first), then
    BlockSWAEvicted per tombstoned node."""
    stored: list[Event] = []
    tombstones: list[Event] = []
    for item in walk_blocks(roots, page_size):
        tokens = item.node._token_ids
        parents = [item.parent_hash, *item.hashes[:-1]]
        for i, (h, p) in enumerate(zip(item.hashes, parents, strict=True)):
            page = tokens[i * page_size : (i + 1) * page_size]
            stored.append(BlockStored((h,), p, page, page_size))
        if item.node._tombstone:
            tombstones.append(BlockSWAEvicted(tuple(item.hashes)))
    return stored + tombstones


def digest_from_scratch(roots: Iterable[tuple[str | None, TreeNode]], page_size: int) -> str:
    """The state digest of every page in the tree, recomputed without the sink."""
    digest = StateDigest()
    for item in walk_blocks(roots, page_size):
        resident = not item.node._tombstone
        parents = [item.parent_hash, *item.hashes[:-1]]
        for h, p in zip(item.hashes, parents, strict=True):
            digest.add(h, p, resident)
    return digest.hexdigest()
