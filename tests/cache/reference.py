"""A plain reference replica for tests: blocks in a dict, rebuilt only from emitted events."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    StateDigest,
)


@dataclass
class ReferenceBlocks:
    """block hash → (parent hash, SWA resident, tokens); strict about impossible events."""

    blocks: dict[int, tuple[int | None, bool, tuple[int, ...]]] = field(default_factory=dict)

    def apply(self, events: Iterable[Event]) -> None:
        """Apply events in order; fail on a duplicate store or a change to an unknown block."""
        for event in events:
            match event:
                case BlockStored(block_hashes=(h,), parent_block_hash=parent, token_ids=tokens):
                    assert h not in self.blocks, f"block {h} stored twice"
                    assert parent is None or parent in self.blocks, f"block {h}: unknown parent"
                    self.blocks[h] = (parent, True, tokens)
                case BlockRemoved(block_hashes=hashes):
                    for h in hashes:
                        del self.blocks[h]
                case BlockSWAEvicted(block_hashes=hashes):
                    self._set_residency(hashes, False)
                case BlockSWARestored(block_hashes=hashes):
                    self._set_residency(hashes, True)
                case AllBlocksCleared():
                    self.blocks.clear()
                case _:
                    raise AssertionError(f"unexpected event {event!r}")

    def _set_residency(self, hashes: tuple[int, ...], resident: bool) -> None:
        for h in hashes:
            parent, was, tokens = self.blocks[h]
            assert was != resident, f"block {h}: residency already {resident}"
            self.blocks[h] = (parent, resident, tokens)

    def hexdigest(self) -> str:
        """The state digest of the blocks held, as a replica computes it."""
        digest = StateDigest()
        for h, (parent, resident, _) in self.blocks.items():
            digest.add(h, parent, resident)
        return digest.hexdigest()
