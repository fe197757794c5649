"""``BlockModel``: the set of blocks a stream of events describes, the test oracle of every
replica, and the one Python model of what each event type does to blocks and the state digest
(the tests' reference replica applies its events through one, after the native store's checks).

It holds, per block hash, the parent hash, the page's tokens and whether the block is SWA
resident, and keeps the state digest in step, so a test compares a replica, a primary or a
publisher's output with it. It is strict: storing a block twice, a parent it does not hold or
touching an unknown block raises ``BlockModelError`` naming the block, and so does setting a
block to the SWA residency it already has, unless ``strict_residency=False`` (a replica accepts
such a repeat; a tree never emits one). Test doubles that emit events (a fake cache, a primary
model) apply each event they emit to one, so the model is also what they hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cache.errors import SwaEsError
from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    StateDigest,
)


class BlockModelError(SwaEsError, AssertionError):
    """An event a correct stream could not contain (named block, what is wrong)."""


@dataclass(slots=True)
class ModelBlock:
    """One block: its parent (``None`` at a root), its page's tokens, its SWA residency."""

    parent: int | None
    tokens: tuple[int, ...]
    resident: bool = True


class BlockModel:
    """Blocks by hash in insertion order (parents before children), with their state digest."""

    def __init__(self, *, strict_residency: bool = True) -> None:
        self.blocks: dict[int, ModelBlock] = {}
        self.digest = StateDigest()
        self.strict_residency = strict_residency

    def __len__(self) -> int:
        return len(self.blocks)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self.blocks

    def __iter__(self) -> Iterator[int]:
        return iter(self.blocks)

    def hexdigest(self) -> str:
        """The state digest of the blocks held (what the primary's ``state_digest()`` says)."""
        return self.digest.hexdigest()

    def residency(self) -> dict[int, tuple[int | None, bool]]:
        """``{hash: (parent, resident)}``: the shape a test compares most often."""
        return {h: (b.parent, b.resident) for h, b in self.blocks.items()}

    def apply_all(self, events: Iterable[Event]) -> None:
        """Apply ``events`` in order."""
        for event in events:
            self.apply(event)

    def apply(self, event: Event) -> None:
        """Apply one event (a ``BlockStored`` may list a chain of pages, as on the wire)."""
        match event:
            case BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens):
                self._store(hashes, parent, tokens, event.block_size)
            case BlockRemoved(block_hashes=hashes):
                for h in hashes:
                    block = self._held(h, "removed")
                    del self.blocks[h]
                    self.digest.remove(h, block.parent, block.resident)
            case BlockSWAEvicted(block_hashes=hashes):
                self._set_residency(hashes, resident=False)
            case BlockSWARestored(block_hashes=hashes):
                self._set_residency(hashes, resident=True)
            case AllBlocksCleared():
                self.blocks.clear()
                self.digest.clear()
            case _:
                raise BlockModelError(f"unexpected event {event!r}")

    def _held(self, block_hash: int, action: str) -> ModelBlock:
        block = self.blocks.get(block_hash)
        if block is None:
            raise BlockModelError(f"block {block_hash} {action} but not held")
        return block

    def _store(
        self,
        hashes: tuple[int, ...],
        parent: int | None,
        tokens: tuple[int, ...],
        block_size: int,
    ) -> None:
        if parent is not None and parent not in self.blocks:
            raise BlockModelError(f"block {hashes[0]} stored under unknown parent {parent}")
        for index, h in enumerate(hashes):
            if h in self.blocks:
                raise BlockModelError(f"block {h} stored twice")
            page = tokens[index * block_size : (index + 1) * block_size]
            self.blocks[h] = ModelBlock(parent, tuple(page))
            self.digest.add(h, parent, True)
            parent = h

    def _set_residency(self, hashes: tuple[int, ...], *, resident: bool) -> None:
        for h in hashes:
            block = self._held(h, "restored" if resident else "evicted")
            if block.resident == resident:
                if self.strict_residency:
                    raise BlockModelError(f"block {h}: SWA residency is already {resident}")
                continue
            block.resident = resident
            self.digest.set_residency(h, block.parent, resident)

    def snapshot_events(self, block_size: int) -> list[Event]:
        """The blocks as events a fresh replica can apply after ``AllBlocksCleared``: one
        ``BlockStored`` per block in insertion order (parents first), then a
        ``BlockSWAEvicted`` per tombstone."""
        stored: list[Event] = [
            BlockStored((h,), b.parent, b.tokens, block_size) for h, b in self.blocks.items()
        ]
        evicted: list[Event] = [
            BlockSWAEvicted((h,)) for h, b in self.blocks.items() if not b.resident
        ]
        return stored + evicted
