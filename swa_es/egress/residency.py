"""SWA residency on the stream out, in the shapes engines' consumers read it.

Two tombstone policies of the stream out carry residency instead of dropping it:

- ``groups`` (``--zmq-format vllm``): a source whose stream reports SWA residency is sent as a
  vLLM hybrid model's events: every block stored in group 0 (``full_attention``) and, with a
  dense span (its own hashes, parent and tokens), in group 1 (``sliding_window``); a tombstone
  is group 1's ``BlockRemoved``; a restore is group 1's ``BlockStored`` again; a removal is
  group 0's, plus group 1's for a block that was not a tombstone. vLLM sends one hash per
  ``BlockRemoved``, and so does this. The window sent, ``kv_cache_spec_sliding_window``, is ours
  plus one: vLLM's hybrid hit needs ``ceil((W - 1) / block)`` blocks after a freed one where
  our rule (docs/design.md §3) needs ``ceil(W / page)``, so a consumer that applies vLLM's rule
  to the window sent applies ours. A source without residency is sent as one full-attention
  group; lower tiers' events stay group 0's (no engine reports a lower tier's SWA KV).
- ``events`` (``--zmq-format sglang``): our sglang integration's extension
  (``swa_es.integrations.sglang.wire``): ``BlockSWAEvicted`` / ``BlockSWARestored`` with the
  source's window, and a ``BlockSWARestored`` without hashes right after each
  ``AllBlocksCleared`` of a source with residency (it declares the window). Unlike the
  integration inside sglang, the stream out keeps one message per log record, so these share a
  batch with sglang's own events: only consumers that read the extension (``swa-es bridge``)
  should subscribe to a stream in this mode.

Both need what came before in the run: each source's window (from its epoch's ``meta``) and, for
``groups``, which blocks are tombstones now (a removal of one must not name group 1).
``ResidencyStream`` holds that for one run, fed every batch in stream order; a replay re-derives
it from the run's start. A restore's dense span needs the block's parent and tokens, which our
``BlockSWARestored`` does not carry: ``lookup`` reads them from the follower's replica (a block
hash names its content, so any time the replica holds the block its answer is right). A restore
of a block the replica no longer holds (the stream is behind the follower and the block was
removed since) is not sent: the block stays a tombstone for the consumer until its removal,
which follows in the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from cache.events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
)
from swa_es.integrations.sglang.wire import SWA_EVICTED, SWA_RESTORED

FULL_GROUP: Final = 0
SWA_GROUP: Final = 1
FULL_KIND: Final = "full_attention"
SWA_KIND: Final = "sliding_window"

BlockLookup = Callable[[str, int], tuple[int | None, tuple[int, ...]] | None]
"""(source, block hash) -> the block's (parent hash, token ids), None when not held."""


def _on_gpu(medium: str | None) -> bool:
    return medium in (None, MEDIUM_GPU)


@dataclass(slots=True)
class _Source:
    window: int | None = None
    tombstoned: set[int] = field(default_factory=set)


@dataclass(slots=True)
class ResidencyStream:
    """One run's per-source residency state (see the module docs)."""

    lookup: BlockLookup | None = None
    _sources: dict[str, _Source] = field(default_factory=dict)

    def _source(self, batch: EventBatch) -> _Source:
        state = self._sources.setdefault(batch.source, _Source())
        meta = batch.meta
        if meta is not None:
            has_residency = meta.swa_events and meta.sliding_window_size > 0
            state.window = meta.sliding_window_size if has_residency else None
        return state

    def vllm_groups(self, batch: EventBatch) -> list[tuple[Event, int]]:
        """``batch``'s events as (event, group) pairs of a vLLM hybrid model, one hash per
        removal; a store or restore of group 1 is a ``BlockStored`` whose group says so."""
        state = self._source(batch)
        out: list[tuple[Event, int]] = []
        for event in batch.events:
            match event:
                case AllBlocksCleared():
                    state.tombstoned.clear()
                    out.append((event, FULL_GROUP))
                case BlockStored() if state.window is None or not _on_gpu(event.medium):
                    out.append((event, FULL_GROUP))
                case BlockStored():
                    out.extend(((event, FULL_GROUP), (event, SWA_GROUP)))
                case BlockRemoved() if state.window is None or not _on_gpu(event.medium):
                    out.append((event, FULL_GROUP))
                case BlockRemoved():
                    for block_hash in event.block_hashes:
                        one = BlockRemoved((block_hash,), event.medium, event.reason)
                        out.append((one, FULL_GROUP))
                        if block_hash in state.tombstoned:
                            state.tombstoned.discard(block_hash)
                        else:
                            out.append((one, SWA_GROUP))
                case BlockSWAEvicted() if state.window is not None:
                    for block_hash in event.block_hashes:
                        if block_hash not in state.tombstoned:
                            state.tombstoned.add(block_hash)
                            out.append((BlockRemoved((block_hash,)), SWA_GROUP))
                case BlockSWARestored() if state.window is not None:
                    out.extend(self._restores(batch.source, state, event.block_hashes))
        return out

    def _restores(
        self, source: str, state: _Source, hashes: tuple[int, ...]
    ) -> list[tuple[Event, int]]:
        out: list[tuple[Event, int]] = []
        for block_hash in hashes:
            found = None if self.lookup is None else self.lookup(source, block_hash)
            if block_hash not in state.tombstoned or found is None:
                continue
            state.tombstoned.discard(block_hash)
            parent, tokens = found
            out.append((BlockStored((block_hash,), parent, tokens, len(tokens)), SWA_GROUP))
        return out

    def vllm_window(self, source: str) -> int | None:
        """The ``kv_cache_spec_sliding_window`` sent for ``source``'s group 1 (ours + 1)."""
        state = self._sources.get(source)
        return None if state is None or state.window is None else state.window + 1

    def sglang_extension(self, batch: EventBatch) -> list[list[Any]]:
        """Per event of ``batch``, in order, the extension rows that go right after sglang's own
        encoding of it (none when the source has no residency): a tombstone's or restore's
        row, and the window's declaration after a clear. ``batch``'s meta is read first."""
        state = self._source(batch)
        window = state.window
        rows: list[list[Any]] = []
        for event in batch.events:
            if window is None:
                rows.append([])
                continue
            match event:
                case BlockSWAEvicted():
                    rows.append([[SWA_EVICTED, list(event.block_hashes), MEDIUM_GPU, window]])
                case BlockSWARestored():
                    rows.append([[SWA_RESTORED, list(event.block_hashes), MEDIUM_GPU, window]])
                case AllBlocksCleared():
                    rows.append([[SWA_RESTORED, [], MEDIUM_GPU, window]])
                case _:
                    rows.append([])
        return rows
