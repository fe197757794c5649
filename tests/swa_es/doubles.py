"""A tiny fake cache that emits hand-made events, and a strict reference replay of a log."""

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


@dataclass
class _Block:
    parent: int | None
    tokens: tuple[int, ...]
    swa_resident: bool = True


class FakeCache:
    """Blocks keyed by hash with parent and residency; every mutation buffers its event."""

    def __init__(self, *, page_size: int = 1, sliding_window_size: int = 4) -> None:
        self.page_size = page_size
        self.sliding_window_size = sliding_window_size
        self.device = "cpu"
        self.blocks: dict[int, _Block] = {}
        self.events: list[Event] = []
        self.digest = StateDigest()
        self.take_calls = 0

    def store(self, block_hash: int, parent: int | None = None) -> None:
        """A page enters the tree."""
        tokens = tuple(range(self.page_size))
        self.blocks[block_hash] = _Block(parent, tokens)
        self.digest.add(block_hash, parent, True)
        self.events.append(BlockStored((block_hash,), parent, tokens, self.page_size))

    def tombstone(self, block_hash: int) -> None:
        """A page loses its SWA KV."""
        block = self.blocks[block_hash]
        block.swa_resident = False
        self.digest.set_residency(block_hash, block.parent, False)
        self.events.append(BlockSWAEvicted((block_hash,)))

    def restore(self, block_hash: int) -> None:
        """A tombstoned page gets its SWA KV back."""
        block = self.blocks[block_hash]
        block.swa_resident = True
        self.digest.set_residency(block_hash, block.parent, True)
        self.events.append(BlockSWARestored((block_hash,)))

    def remove(self, block_hash: int) -> None:
        """A page leaves the tree."""
        block = self.blocks.pop(block_hash)
        self.digest.remove(block_hash, block.parent, block.swa_resident)
        self.events.append(BlockRemoved((block_hash,)))

    def take_events(self) -> list[Event]:
        """The buffered events; clears the buffer."""
        self.take_calls += 1
        events, self.events = self.events, []
        return events

    def snapshot_events(self) -> list[Event]:
        """Every block, parents first (insertion order), tombstones as ``BlockSWAEvicted``."""
        stored: list[Event] = [
            BlockStored((h,), b.parent, b.tokens, self.page_size) for h, b in self.blocks.items()
        ]
        evicted: list[Event] = [
            BlockSWAEvicted((h,)) for h, b in self.blocks.items() if not b.swa_resident
        ]
        return stored + evicted

    def state_digest(self) -> str:
        """The digest of the blocks held now."""
        return self.digest.hexdigest()


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
    if choice < 0.7 and cache.blocks[h].swa_resident:
        cache.tombstone(h)
    elif choice < 0.8 and not cache.blocks[h].swa_resident:
        cache.restore(h)
    elif h not in parents:
        cache.remove(h)


@dataclass
class ReplayState:
    """What a strict reference follower holds for one source."""

    epoch: str = ""
    next_seq: int = 0
    blocks: dict[int, tuple[int | None, bool]] = field(default_factory=dict)
    digest: StateDigest = field(default_factory=StateDigest)
    batches: list[EventBatch] = field(default_factory=list)
    epochs: list[str] = field(default_factory=list)
    digests_checked: int = 0


def _apply(state: ReplayState, event: Event) -> None:
    match event:
        case AllBlocksCleared():
            state.blocks.clear()
            state.digest.clear()
        case BlockStored(block_hashes=hashes, parent_block_hash=parent):
            for h in hashes:
                assert h not in state.blocks, f"block {h} stored twice"
                state.blocks[h] = (parent, True)
                state.digest.add(h, parent, True)
                parent = h
        case BlockRemoved(block_hashes=hashes):
            for h in hashes:
                p, resident = state.blocks.pop(h)
                state.digest.remove(h, p, resident)
        case BlockSWAEvicted(block_hashes=hashes) | BlockSWARestored(block_hashes=hashes):
            resident = isinstance(event, BlockSWARestored)
            for h in hashes:
                p, _ = state.blocks[h]
                state.blocks[h] = (p, resident)
                state.digest.set_residency(h, p, resident)


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
    for event in batch.events:
        _apply(state, event)
    if batch.digest is not None:
        assert batch.digest == state.digest.hexdigest(), "in-band digest mismatch"
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
