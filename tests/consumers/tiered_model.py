"""A source with lower tiers for consumer and routing tests: its GPU blocks through
``PrimaryModel``, and its stores and removals on other media written as our log carries them
(our block hashes, ``medium`` set), with the state digest a bridge's mirror computes."""

from __future__ import annotations

import time
from collections.abc import Sequence

from cache.events import BlockRemoved, BlockStored, Event, EventBatch, StateDigest
from tests.consumers.primary_model import PrimaryModel


class TieredSource:
    """A source's GPU blocks (through ``PrimaryModel``) and lower-tier stores and removals
    written as our log carries them, with the state digest a bridge's mirror computes."""

    def __init__(self, name: str, page_size: int = 2) -> None:
        self.page_size = page_size
        self.model = PrimaryModel(name, page_size=page_size, sliding_window_size=4)
        self.tiers: dict[str, set[int]] = {}

    def hashes(self, token_ids: Sequence[int]) -> list[int]:
        """The block hashes of the whole pages of ``token_ids``."""
        return self.model.hashes(token_ids)

    def tier_store(self, medium: str, token_ids: Sequence[int], first_page: int) -> list[Event]:
        """Pages ``first_page`` on of ``token_ids`` stored on ``medium`` (one chained store)."""
        hashes = self.hashes(token_ids)[first_page:]
        held = self.tiers.setdefault(medium, set())
        held.update(hashes)
        parent = self.hashes(token_ids)[first_page - 1] if first_page else None
        tokens = tuple(
            token_ids[first_page * self.page_size : (first_page + len(hashes)) * self.page_size]
        )
        return [BlockStored(tuple(hashes), parent, tokens, self.page_size, None, medium)]

    def tier_remove(self, medium: str, hashes: Sequence[int]) -> list[Event]:
        """``hashes`` removed from ``medium`` (evicted)."""
        self.tiers[medium].difference_update(hashes)
        return [BlockRemoved(tuple(hashes), medium, "evicted")]

    def digest(self) -> str:
        """The state digest: the GPU blocks' terms and every tier block's."""
        digest = StateDigest(self.model.digest.value)
        for medium, held in self.tiers.items():
            for block_hash in held:
                digest.add_tier(block_hash, medium)
        return digest.hexdigest()

    def batch(self, events: Sequence[Event]) -> EventBatch:
        """The next batch, carrying the state digest with the tiers' terms."""
        self.model.seq += 1
        model = self.model
        return EventBatch(
            model.source, model.epoch, model.seq, time.time(), tuple(events), self.digest()
        )
