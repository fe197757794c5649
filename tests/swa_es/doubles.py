"""A tiny fake cache that emits hand-made events, and a strict reference replay of a log
(both hold their blocks in a ``swa_es.testing.BlockModel``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    StateDigest,
    decode_batch,
)
from log import EventLog
from swa_es.testing import BlockModel, ModelBlock


class FakeCache:
    """Blocks keyed by hash with parent and residency; every mutation buffers its event and
    applies it to the ``BlockModel`` that is the fake's state."""

    def __init__(self, *, page_size: int = 1, sliding_window_size: int = 4) -> None:
        self.page_size = page_size
        self.sliding_window_size = sliding_window_size
        self.device = "cpu"
        self.model = BlockModel()
        self.events: list[Event] = []
        self.take_calls = 0

    @property
    def blocks(self) -> dict[int, ModelBlock]:
        """The blocks held, by hash."""
        return self.model.blocks

    def _emit(self, event: Event) -> None:
        self.model.apply(event)
        self.events.append(event)

    def store(self, block_hash: int, parent: int | None = None) -> None:
        """A page enters the tree."""
        tokens = tuple(range(self.page_size))
        self._emit(BlockStored((block_hash,), parent, tokens, self.page_size))

    def tombstone(self, block_hash: int) -> None:
        """A page loses its SWA KV."""
        self._emit(BlockSWAEvicted((block_hash,)))

    def restore(self, block_hash: int) -> None:
        """A tombstoned page gets its SWA KV back."""
        self._emit(BlockSWARestored((block_hash,)))

    def remove(self, block_hash: int) -> None:
        """A page leaves the tree."""
        self._emit(BlockRemoved((block_hash,)))

    def take_events(self) -> list[Event]:
        """The buffered events; clears the buffer."""
        self.take_calls += 1
        events, self.events = self.events, []
        return events

    def snapshot_events(self) -> list[Event]:
        """Every block, parents first (insertion order), tombstones as ``BlockSWAEvicted``."""
        return self.model.snapshot_events(self.page_size)

    def state_digest(self) -> str:
        """The digest of the blocks held now."""
        return self.model.hexdigest()


def random_mutation(cache: FakeCache, rng: random.Random, next_hash: list[int]) -> None:
    """One random mutation: store a child, tombstone, restore or remove a leaf."""
    hashes = list(cache.blocks)
    choice = rng.random()
    if not hashes or choice < 0.5:
        parent = rng.choice(hashes) if hashes and rng.random() < 0.8 else None
        cache.store(next_hash[0], parent)
        next_hash[0] += 1
        return
    h = rng.choice(hashes)
    parents = {b.parent for b in cache.blocks.values()}
    if choice < 0.7 and cache.blocks[h].resident:
        cache.tombstone(h)
    elif choice < 0.8 and not cache.blocks[h].resident:
        cache.restore(h)
    elif h not in parents:
        cache.remove(h)


@dataclass
class ReplayState:
    """What a strict reference follower holds for one source."""

    epoch: str = ""
    next_seq: int = 0
    model: BlockModel = field(default_factory=BlockModel)
    batches: list[EventBatch] = field(default_factory=list)
    epochs: list[str] = field(default_factory=list)
    digests_checked: int = 0

    @property
    def blocks(self) -> dict[int, tuple[int | None, bool]]:
        """``{hash: (parent, resident)}`` of the blocks held."""
        return self.model.residency()

    @property
    def digest(self) -> StateDigest:
        """The state digest of the blocks held."""
        return self.model.digest


def apply_batch(state: ReplayState, batch: EventBatch) -> None:
    """Apply one batch, asserting the epoch/seq rules and the in-band digest."""
    if batch.epoch != state.epoch:
        assert batch.seq == 0, f"epoch {batch.epoch} starts at seq {batch.seq}"
        assert batch.events[:1] == (AllBlocksCleared(),), "new epoch without AllBlocksCleared"
        assert batch.meta is not None, "epoch's first batch without meta"
        assert batch.epoch not in state.epochs, "epoch reused"
        state.epoch, state.next_seq = batch.epoch, 0
        state.epochs.append(batch.epoch)
    assert batch.seq == state.next_seq, f"seq gap: got {batch.seq}, want {state.next_seq}"
    state.next_seq += 1
    state.model.apply_all(batch.events)
    if batch.digest is not None:
        assert batch.digest == state.model.hexdigest(), "in-band digest mismatch"
        state.digests_checked += 1
    state.batches.append(batch)


async def replay(log: EventLog) -> dict[str, ReplayState]:
    """Replay every record of ``log`` strictly; one state per source (the record key)."""
    states: dict[str, ReplayState] = {}
    async for record in log.read("beginning"):
        batch = decode_batch(record.payload)
        assert record.key == batch.source, "record key is not the source id"
        apply_batch(states.setdefault(batch.source, ReplayState()), batch)
    return states
