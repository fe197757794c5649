"""A tiny model of a primary for consumer tests: real block hashes, real digests, no tree.

It emits the events a primary would for simple operations (applying each to its ``BlockModel``,
which is what it holds) and numbers its batches like a publisher, so tests can write
well-formed (or deliberately broken) streams through a real log.
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
from swa_es.testing import BlockModel, ModelBlock


@dataclass
class PrimaryModel:
    """Blocks of one source plus the (epoch, seq) numbering of its batches."""

    source: str
    page_size: int = 1
    sliding_window_size: int = 4
    # Tests may repeat a residency change (a replica accepts it), so the model does too.
    model: BlockModel = field(default_factory=lambda: BlockModel(strict_residency=False))
    epoch: str = ""
    seq: int = 0

    @property
    def blocks(self) -> dict[int, ModelBlock]:
        """The blocks held, by hash."""
        return self.model.blocks

    @property
    def digest(self) -> StateDigest:
        """The state digest of the blocks held."""
        return self.model.digest

    def _emit(self, event: Event) -> list[Event]:
        self.model.apply(event)
        return [event]

    def hashes(self, token_ids: Sequence[int], extra_key: str | None = None) -> list[int]:
        """The block hashes of the whole pages of ``token_ids``."""
        prior = namespace_prior(extra_key)
        return block_hashes_of(chain_page_digests(prior, token_ids, self.page_size))

    def store(self, token_ids: Sequence[int], extra_key: str | None = None) -> list[Event]:
        """Events that store every page of ``token_ids`` not held yet (one BlockStored)."""
        hashes = self.hashes(token_ids, extra_key)
        held = 0
        while held < len(hashes) and hashes[held] in self.model:
            held += 1
        if held == len(hashes):
            return []
        tokens = tuple(token_ids[held * self.page_size : len(hashes) * self.page_size])
        parent = hashes[held - 1] if held else None
        return self._emit(BlockStored(tuple(hashes[held:]), parent, tokens, self.page_size))

    def tombstone(self, hashes: Sequence[int]) -> list[Event]:
        """Events that free the SWA KV of ``hashes``."""
        return self._emit(BlockSWAEvicted(tuple(hashes)))

    def revive(self, hashes: Sequence[int]) -> list[Event]:
        """Events that give ``hashes`` SWA KV again."""
        return self._emit(BlockSWARestored(tuple(hashes)))

    def remove(self, hashes: Sequence[int]) -> list[Event]:
        """Events that drop ``hashes`` (a leaf chain, deepest last)."""
        return self._emit(BlockRemoved(tuple(hashes)))

    def clear(self) -> list[Event]:
        """Events of ``reset()``."""
        return self._emit(AllBlocksCleared())

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
