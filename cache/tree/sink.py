"""Where the tree's changes go: the native event recorder, or nowhere (events off).

The tree calls its sink at every block-level change. With events on, ``RecorderSink`` passes each
change to the native ``EventRecorder`` as one small op (node ids and, for a store, the tokens):
nothing is hashed and no event object is built on the serving loop. Hashing, the digest and the
events happen in the core, when someone reads them (``take_events()``, ``state_digest()``) or in
a publisher's worker thread. With events off the tree gets ``NullSink``, so nothing at all happens
and no ``if enabled`` tests are scattered through the tree.

``tests.oracles.sink.ReferenceSink`` is the pure-Python twin (tests only).
"""

from __future__ import annotations

from array import array
from typing import Protocol

from cache.events import Event
from cache.events.recorder import EventRecorder
from cache.tree.node import TreeNode


class EventSink(Protocol):
    """Receives every block-level change of the tree."""

    def root(self, node: TreeNode, extra_key: str | None) -> None:
        """``node`` became the (empty) root of namespace ``extra_key``."""

    def stored(self, node: TreeNode, ids: array[int], start: int) -> None:
        """``node`` was linked into the tree with all its pages SWA-resident; its tokens, as
        unsigned 32-bit ids, are ``ids[start : start + len(node._token_ids)]``."""

    def removed(self, node: TreeNode) -> None:
        """``node`` (all its pages) is about to leave the tree."""

    def swa_evicted(self, node: TreeNode) -> None:
        """``node`` was tombstoned."""

    def swa_restored(self, node: TreeNode) -> None:
        """``node`` got SWA KV again."""

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """``suffix`` was split; ``prefix`` took its first ``prefix_pages`` pages."""

    def cleared(self) -> None:
        """Every node, namespace roots included, was dropped."""

    def take(self) -> list[Event]:
        """The events recorded since the last call."""
        ...

    def digest_value(self) -> int | None:
        """The maintained digest accumulator, or None when this sink keeps none."""
        ...

    def snapshot(self) -> list[Event] | None:
        """The whole tree as events from what the sink holds, or None when it holds nothing."""
        ...

    def block_hashes(self, node: TreeNode) -> list[int] | None:
        """The block hashes the sink holds for ``node``'s pages, or None when it holds none."""
        ...

    @property
    def recorder(self) -> EventRecorder | None:
        """The native recorder behind this sink, if any (what a publisher cuts steps from)."""
        ...


class NullSink:
    """Events disabled: nothing is hashed, recorded or digested."""

    def root(self, node: TreeNode, extra_key: str | None) -> None:
        """Ignore a new namespace root."""

    def stored(self, node: TreeNode, ids: array[int], start: int) -> None:
        """Ignore a store."""

    def removed(self, node: TreeNode) -> None:
        """Ignore a removal."""

    def swa_evicted(self, node: TreeNode) -> None:
        """Ignore a tombstoning."""

    def swa_restored(self, node: TreeNode) -> None:
        """Ignore a restore."""

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """Ignore a split."""

    def cleared(self) -> None:
        """Ignore a clear."""

    def take(self) -> list[Event]:
        """Always empty."""
        return []

    def digest_value(self) -> int | None:
        """No digest is maintained."""
        return None

    def snapshot(self) -> list[Event] | None:
        """Nothing is held: the tree walks itself."""
        return None

    def block_hashes(self, node: TreeNode) -> list[int] | None:
        """No hashes are held."""
        return None

    @property
    def recorder(self) -> EventRecorder | None:
        """No recorder."""
        return None


class RecorderSink:
    """Events on: every change becomes one op of the native ``EventRecorder``."""

    __slots__ = ("_page_size", "_recorder")

    def __init__(self, page_size: int) -> None:
        self._page_size = page_size
        self._recorder = EventRecorder(page_size)

    @property
    def recorder(self) -> EventRecorder:
        """The native recorder (a publisher cuts its steps from it)."""
        return self._recorder

    def root(self, node: TreeNode, extra_key: str | None) -> None:
        """Record a new namespace root."""
        self._recorder.root(node.node_id, extra_key)

    def stored(self, node: TreeNode, ids: array[int], start: int) -> None:
        """Record the store of ``node``'s tokens under its parent (hashed later, in the core);
        the recorder copies them from ``ids`` in one block."""
        parent = node._parent
        assert parent is not None, "a namespace root is never stored"
        self._recorder.stored(node.node_id, parent.node_id, ids, start, len(node._token_ids))

    def removed(self, node: TreeNode) -> None:
        """Record a removal."""
        self._recorder.removed(node.node_id, len(node._token_ids) // self._page_size)

    def swa_evicted(self, node: TreeNode) -> None:
        """Record a tombstoning."""
        self._recorder.swa_evicted(node.node_id, len(node._token_ids) // self._page_size)

    def swa_restored(self, node: TreeNode) -> None:
        """Record a restore."""
        self._recorder.swa_restored(node.node_id, len(node._token_ids) // self._page_size)

    def split(self, prefix: TreeNode, suffix: TreeNode, prefix_pages: int) -> None:
        """Record a split (no event: hashes are per page and survive it)."""
        self._recorder.split(prefix.node_id, suffix.node_id, prefix_pages)

    def cleared(self) -> None:
        """Record that everything was dropped."""
        self._recorder.cleared()

    def take(self) -> list[Event]:
        """The events since the last call, one ``BlockStored`` per page (hashes them first)."""
        return self._recorder.take_events()

    def digest_value(self) -> int:
        """The digest of every page in the tree (processes pending ops first)."""
        return self._recorder.digest()

    def snapshot(self) -> list[Event]:
        """The tree as events, from the recorder's node table."""
        return self._recorder.snapshot_events()

    def block_hashes(self, node: TreeNode) -> list[int] | None:
        """The recorder's block hashes of ``node``'s pages."""
        return self._recorder.block_hashes(node.node_id)
