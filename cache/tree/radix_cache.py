"""``SWARadixCache``: the sliding-window-attention radix KV cache whose every change is an event.

A radix tree of page-aligned token runs over two KV pools (``SWAKVAllocator``). A node whose SWA
KV was freed while its full KV is kept is a *tombstone*. Events (docs/design.md §4) are recorded
per page for stores and per node for removals and SWA residency changes; ``state_digest()`` is kept
incrementally and equals what a replica computes from those events.

Decisions where the design leaves room:

* The constructor records ``AllBlocksCleared`` (as sglang does), so a fresh tree's first
  ``take_events()`` is ``[AllBlocksCleared()]``.
* With events on, the tree hashes nothing either: it records what changed (node, parent,
  tokens) into the native ``EventRecorder``, which hashes, digests and builds events when they
  are read, or in a publisher's worker thread (``event_recorder``).
* With ``enable_events=False`` nothing is recorded at all; ``state_digest()`` and
  ``snapshot_events()`` then recompute from the tree (O(tree)).
* ``total_size()`` is ``(full tokens held, SWA-resident tokens held)``, as in sglang.
* ``sanity_check(caller_held_full=, caller_held_swa=)``: the tree cannot know what callers hold;
  given those counts it checks ``free + tree + callers == total`` exactly, else ``<=``.
* ``reset()`` drops every lock; handles taken before it raise ``LockError`` if released.
* The SWA-locked span is made exact by splitting at lock time (``inc_lock_ref``), not at
  insert: a lock handle records the span's length in tokens, which later splits preserve.
* ``inc_lock_ref`` refuses (``LockError``) a node whose SWA span would cover a tombstone; a
  ``match_prefix`` result never does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from cache.allocator import SWAKVAllocator
from cache.errors import SanityError
from cache.events import Event, format_digest
from cache.events.recorder import EventRecorder
from cache.tree.evict import evict
from cache.tree.insert import insert
from cache.tree.keys import aligned_tokens, check_token_ids
from cache.tree.lock import dec_lock_ref, inc_lock_ref
from cache.tree.match import match_prefix
from cache.tree.node import TreeNode
from cache.tree.results import EvictResult, LockHandle, MatchResult
from cache.tree.sanity import sanity_check
from cache.tree.sink import EventSink, NullSink, RecorderSink
from cache.tree.state import TreeState
from cache.tree.walk import digest_from_scratch, snapshot_events

logger = logging.getLogger(__name__)

TokenIds = Sequence[int] | torch.Tensor


class SWARadixCache:
    """Prefix cache over an ``SWAKVAllocator`` with a sliding window of ``sliding_window_size``."""

    def __init__(
        self,
        allocator: SWAKVAllocator,
        sliding_window_size: int,
        page_size: int = 1,
        enable_events: bool = True,
    ) -> None:
        if page_size != allocator.page_size:
            raise ValueError(f"page_size={page_size}, the allocator pages by {allocator.page_size}")
        if sliding_window_size <= 0:
            raise ValueError(f"sliding_window_size must be positive, got {sliding_window_size}")
        self._allocator = allocator
        self._events_enabled = enable_events
        sink: EventSink = RecorderSink(page_size) if enable_events else NullSink()
        self._state = TreeState(allocator, page_size, sliding_window_size, sink)
        sink.cleared()
        self._state.root_of(None)

    # --- configuration ----------------------------------------------------------------------

    @property
    def page_size(self) -> int:
        """Tokens per page; keys are cut to whole pages."""
        return self._state.page_size

    @property
    def sliding_window_size(self) -> int:
        """The attention window in tokens."""
        return self._state.window

    @property
    def device(self) -> torch.device:
        """The device of every index tensor."""
        return self._allocator.device

    @property
    def allocator(self) -> SWAKVAllocator:
        """The two-pool allocator the tree takes slots from and returns them to."""
        return self._allocator

    @property
    def events_enabled(self) -> bool:
        """True when mutations are recorded as events."""
        return self._events_enabled

    @property
    def root(self) -> TreeNode:
        """The root of the default namespace (``extra_key=None``)."""
        return self._state.root_of(None)

    # --- serving operations -----------------------------------------------------------------

    def match_prefix(self, token_ids: TokenIds, extra_key: str | None = None) -> MatchResult:
        """The longest page-aligned cached prefix usable under the sliding-window rule."""
        key = aligned_tokens(token_ids, self._state.page_size)
        root = self._state.root_of(extra_key)
        if not key:
            return MatchResult(self._state.empty_value, root)
        return match_prefix(self._state, root, key)

    def insert(
        self,
        token_ids: TokenIds,
        value: torch.Tensor,
        prev_prefix_len: int = 0,
        extra_key: str | None = None,
    ) -> int:
        """Cache ``token_ids`` with slots ``value``; return the length that was already cached.

        ``value`` has one slot per token. ``value[:prev_prefix_len]`` came from ``match_prefix``
        (the tree's own); the tree owns ``value[prev_prefix_len:]`` from here on, up to the last
        whole page; slots of a trailing partial page stay the caller's.
        """
        state = self._state
        key = aligned_tokens(token_ids, state.page_size)
        if value.numel() != len(token_ids) or value.dim() != 1:
            raise ValueError(f"insert: {tuple(value.shape)} slots for {len(token_ids)} tokens")
        if value.dtype != torch.int64 or value.device != self._allocator.device:
            raise ValueError(
                f"insert: value must be int64 on {self._allocator.device}, "
                f"got {value.dtype} on {value.device}"
            )
        ids = check_token_ids(key)
        if prev_prefix_len < 0 or prev_prefix_len % state.page_size or prev_prefix_len > len(key):
            raise ValueError(
                f"insert: prev_prefix_len={prev_prefix_len} must be a page-aligned length within "
                f"the {len(key)} aligned tokens"
            )
        if not key:
            return 0
        return insert(state, state.root_of(extra_key), key, ids, value, prev_prefix_len)

    def inc_lock_ref(self, node: TreeNode) -> LockHandle:
        """Protect the path to ``node``: full KV on all of it, SWA KV on its window-sized tail."""
        return inc_lock_ref(self._state, node)

    def dec_lock_ref(self, node: TreeNode, handle: LockHandle) -> None:
        """Release the lock ``handle`` holds on ``node``."""
        dec_lock_ref(self._state, node, handle)

    def evict(self, full_tokens: int = 0, swa_tokens: int = 0) -> EvictResult:
        """Free at least ``full_tokens`` full and ``swa_tokens`` SWA slots where locks allow."""
        return evict(self._state, full_tokens, swa_tokens)

    def reset(self) -> None:
        """Return every slot the tree holds to the allocator and record ``AllBlocksCleared``."""
        state = self._state
        resident: list[torch.Tensor] = []
        tombstoned: list[torch.Tensor] = []
        for root in state.roots.values():
            stack = list(root._children.values())
            while stack:
                node = stack.pop()
                (tombstoned if node._tombstone else resident).append(node._value)
                stack.extend(node._children.values())
        if resident:
            self._allocator.free(torch.cat(resident), swa_resident=True, whole_pages=True)
        if tombstoned:
            self._allocator.free(torch.cat(tombstoned), swa_resident=False, whole_pages=True)
        state.clear()
        state.sink.cleared()
        state.root_of(None)

    # --- events and digests -----------------------------------------------------------------

    @property
    def event_recorder(self) -> EventRecorder | None:
        """The native recorder of this tree's changes (None with events disabled).

        A ``swa_es.Publisher`` cuts its steps from it and has them hashed and encoded off the
        serving loop; ``take_events()`` and ``state_digest()`` read the same recorder.
        """
        return self._state.sink.recorder

    def take_events(self) -> list[Event]:
        """The events recorded since the last call (always empty with events disabled).

        The tree records what changed; this hashes the new pages and builds the events (one
        ``BlockStored`` per page) now, in the native core.
        """
        return self._state.sink.take()

    def snapshot_events(self) -> list[Event]:
        """The whole tree as events: BlockStored per page, parents first (namespace roots in
        creation order, then depth first with children in creation order), then tombstones."""
        held = self._state.sink.snapshot()
        if held is not None:
            return held
        return snapshot_events(self._state.roots.items(), self._state.page_size)

    def state_digest(self) -> str:
        """The order-independent digest of every page and its SWA residency.

        O(1) per event: with events on, the native recorder keeps it; it first processes the
        changes recorded but not yet hashed (it may wait for a publisher's worker thread that is
        processing them). With events off it is recomputed from the tree (O(tree)).
        """
        value = self._state.sink.digest_value()
        if value is None:
            return digest_from_scratch(self._state.roots.items(), self._state.page_size)
        return format_digest(value)

    # --- sizes ------------------------------------------------------------------------------

    def total_size(self) -> tuple[int, int]:
        """(full tokens held by the tree, SWA-resident tokens held by the tree)."""
        s = self._state
        return (
            s.full_evictable + s.full_protected,
            s.swa_evictable + s.swa_protected,
        )

    def full_evictable_size(self) -> int:
        """Full tokens on nodes no lock protects."""
        return self._state.full_evictable

    def swa_evictable_size(self) -> int:
        """SWA-resident tokens on nodes no SWA lock protects."""
        return self._state.swa_evictable

    def full_protected_size(self) -> int:
        """Full tokens on locked nodes."""
        return self._state.full_protected

    def swa_protected_size(self) -> int:
        """SWA-resident tokens on SWA-locked nodes."""
        return self._state.swa_protected

    def sanity_check(
        self, caller_held_full: int | None = None, caller_held_swa: int | None = None
    ) -> None:
        """Raise ``SanityError`` on any broken invariant (O(tree); for tests and debugging).

        Checks links, lengths, lock counts, tombstone rules, both LRU lists, the size counters,
        stored hashes and the maintained digest against a recomputation, the allocator, and pool
        accounting (exact when the caller says how many slots it holds).
        """
        state = self._state
        maintained = state.sink.digest_value()
        sanity_check(state, maintained is not None, caller_held_full, caller_held_swa)
        if maintained is not None:
            recomputed = digest_from_scratch(state.roots.items(), state.page_size)
            if recomputed != format_digest(maintained):
                raise SanityError(f"digest {format_digest(maintained)} != recomputed {recomputed}")
