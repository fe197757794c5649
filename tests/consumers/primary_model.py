"""A tiny model of a primary for consumer tests: real block hashes, real digests, no tree.

It emits the events a primary would for simple operations and numbers its batches like a
publisher, so tests can write well-formed (or deliberately broken) streams through a real log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    StateDigest,
    block_hashes_of,
    chain_page_digests,
    encode_batch,
    namespace_prior,
)


@dataclass
class ModelBlock:
    """One block the model holds."""

    parent: int | None
    resident: bool = True


@dataclass
class PrimaryModel:
    """Blocks of one source plus the (epoch, seq) numbering of its batches."""

    source: str
    page_size: int = 1
    sliding_window_size: int = 4
    blocks: dict[int, ModelBlock] = field(default_factory=dict)
    digest: StateDigest = field(default_factory=StateDigest)
    epoch: str = ""
    seq: int = 0

    def hashes(self, token_ids: Sequence[int], extra_key: str | None = None) -> list[int]:
        """The block hashes of the whole pages of ``token_ids``."""
        prior = namespace_prior(extra_key)
        return block_hashes_of(chain_page_digests(prior, token_ids, self.page_size))

    def store(self, token_ids: Sequence[int], extra_key: str | None = None) -> list[Event]:
        """Events that store every page of ``token_ids`` not held yet (one BlockStored)."""
        hashes = self.hashes(token_ids, extra_key)
        held = 0
        while held < len(hashes) and hashes[held] in self.blocks:
            held += 1
        new = hashes[held:]
        if not new:
            return []
        parent = hashes[held - 1] if held else None
        tokens = tuple(token_ids[held * self.page_size : len(hashes) * self.page_size])
        for block_hash in new:
            self.blocks[block_hash] = ModelBlock(parent)
            self.digest.add(block_hash, parent, True)
            parent = block_hash
        return [BlockStored(tuple(new), hashes[held - 1] if held else None, tokens, self.page_size)]

    def tombstone(self, hashes: Sequence[int]) -> list[Event]:
        """Events that free the SWA KV of ``hashes``."""
        for block_hash in hashes:
            block = self.blocks[block_hash]
            if block.resident:
                block.resident = False
                self.digest.set_residency(block_hash, block.parent, False)
        return [BlockSWAEvicted(tuple(hashes))]

    def revive(self, hashes: Sequence[int]) -> list[Event]:
        """Events that give ``hashes`` SWA KV again."""
        for block_hash in hashes:
            block = self.blocks[block_hash]
            if not block.resident:
                block.resident = True
                self.digest.set_residency(block_hash, block.parent, True)
        return [BlockSWARestored(tuple(hashes))]

    def remove(self, hashes: Sequence[int]) -> list[Event]:
        """Events that drop ``hashes`` (a leaf chain, deepest last)."""
        for block_hash in hashes:
            block = self.blocks.pop(block_hash)
            self.digest.remove(block_hash, block.parent, block.resident)
        return [BlockRemoved(tuple(hashes))]

    def clear(self) -> list[Event]:
        """Events of ``reset()``."""
        self.blocks.clear()
        self.digest.clear()
        return [AllBlocksCleared()]

    def meta(self) -> BatchMeta:
        """The meta of this source's epoch."""
        return BatchMeta(
            page_size=self.page_size,
            sliding_window_size=self.sliding_window_size,
            digest_alg=DIGEST_ALGORITHM,
        )

    def start_epoch(self, epoch: str | None = None) -> EventBatch:
        """The first batch of a fresh epoch: the model empties and says AllBlocksCleared."""
        self.epoch = epoch or uuid.uuid4().hex
        self.seq = 0
        return EventBatch(
            self.source, self.epoch, 0, time.time(), tuple(self.clear()), None, self.meta()
        )

    def batch(self, events: Sequence[Event], *, with_digest: bool = False) -> EventBatch:
        """The next batch of this epoch."""
        self.seq += 1
        digest = self.digest.hexdigest() if with_digest else None
        return EventBatch(self.source, self.epoch, self.seq, time.time(), tuple(events), digest)


def record(batch: EventBatch) -> tuple[str, bytes]:
    """A (key, payload) pair for ``append_batch``."""
    return batch.source, encode_batch(batch)
