"""The pure-Python twin of the native replica store: the readable reference and test oracle.

Imported only by tests (differential tests hold ``cache.events.replica_store`` equal to it);
never selected at run time. Per source, blocks live in a dict ``hash -> ReferenceBlock`` plus a
child count per block. Each event is checked in full before anything changes, so a failing
event leaves the replica as it was (events before it in the batch stay applied). Reasons are
worded exactly as the native store words them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cache.events.digest import StateDigest
from cache.events.hashing import chain_block_hashes, namespace_prior
from cache.events.replica_store import ReplicaConsistencyError
from cache.events.types import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
)
from tests.oracles.swa_rule import usable_prefix


@dataclass(frozen=True, slots=True)
class ReferenceBlock:
    """One held block."""

    parent: int | None
    token_ids: tuple[int, ...]
    swa_resident: bool


@dataclass
class ReferenceReplica:
    """One source's replica."""

    source: str
    page_size: int | None = None
    sliding_window_size: int | None = None
    swa_events: bool = True
    diverged: str | None = None
    block_size: int | None = None
    blocks: dict[int, ReferenceBlock] = field(default_factory=dict)
    children: dict[int, int] = field(default_factory=dict)
    digest: StateDigest = field(default_factory=StateDigest)

    @property
    def tombstone_count(self) -> int:
        """Blocks held as tombstones."""
        return sum(not block.swa_resident for block in self.blocks.values())

    def fail(self, reason: str) -> ReplicaConsistencyError:
        """The error for an event that does not fit."""
        return ReplicaConsistencyError(self.source, reason)

    def clear(self) -> None:
        """Drop every block and end a divergence."""
        self.blocks, self.children = {}, {}
        self.digest = StateDigest()
        self.block_size = None
        self.diverged = None

    def apply(self, event: Event) -> None:
        """Apply one event, or raise and change nothing."""
        match event:
            case BlockStored():
                self._store(event)
            case BlockRemoved():
                self._remove(event.block_hashes)
            case BlockSWAEvicted():
                self._set_residency(event.block_hashes, resident=False, kind="BlockSWAEvicted")
            case BlockSWARestored():
                self._set_residency(event.block_hashes, resident=True, kind="BlockSWARestored")
            case AllBlocksCleared():
                self.clear()

    def _store(self, event: BlockStored) -> None:
        size, hashes = event.block_size, event.block_hashes
        if self.block_size is None and self.page_size is not None and self.page_size != size:
            raise self.fail(f"block_size {size} differs from meta.page_size {self.page_size}")
        if self.block_size is not None and size != self.block_size:
            raise self.fail(f"block_size {size} differs from earlier {self.block_size}")
        parent = event.parent_block_hash
        if parent is not None and parent not in self.blocks:
            raise self.fail(f"BlockStored names unknown parent block {parent}")
        for block_hash in hashes:
            if block_hash in self.blocks:
                raise self.fail(f"BlockStored for block {block_hash}, which is already held")
        if len(set(hashes)) != len(hashes):
            raise self.fail("BlockStored names one block twice")
        self.block_size = size
        previous = parent
        for page, block_hash in enumerate(hashes):
            tokens = event.token_ids[page * size : (page + 1) * size]
            self.blocks[block_hash] = ReferenceBlock(previous, tuple(tokens), True)
            self.children[block_hash] = 0
            if previous is not None:
                self.children[previous] += 1
            self.digest.add(block_hash, previous, True)
            previous = block_hash

    def _remove(self, hashes: Sequence[int]) -> None:
        seen: set[int] = set()
        for block_hash in hashes:
            if block_hash not in self.blocks or block_hash in seen:
                raise self.fail(f"BlockRemoved names unknown block {block_hash}")
            seen.add(block_hash)
        removed_children = dict.fromkeys(hashes, 0)
        for block_hash in hashes:
            parent = self.blocks[block_hash].parent
            if parent in removed_children:
                removed_children[parent] += 1
        for block_hash in hashes:
            if self.children[block_hash] != removed_children[block_hash]:
                raise self.fail(f"BlockRemoved for block {block_hash}, which still has children")
        for block_hash in hashes:
            block = self.blocks[block_hash]
            self.digest.remove(block_hash, block.parent, block.swa_resident)
            if block.parent is not None and block.parent not in removed_children:
                self.children[block.parent] -= 1
        for block_hash in hashes:
            del self.blocks[block_hash], self.children[block_hash]

    def _set_residency(self, hashes: Sequence[int], *, resident: bool, kind: str) -> None:
        for block_hash in hashes:
            if block_hash not in self.blocks:
                raise self.fail(f"{kind} names unknown block {block_hash}")
        for block_hash in hashes:
            block = self.blocks[block_hash]
            if block.swa_resident != resident:
                self.blocks[block_hash] = ReferenceBlock(block.parent, block.token_ids, resident)
                self.digest.set_residency(block_hash, block.parent, resident)


class ReferenceReplicaSet:
    """source -> ``ReferenceReplica``, with prefix matching (the oracle of both views)."""

    def __init__(self) -> None:
        self.replicas: dict[str, ReferenceReplica] = {}

    def replica(self, source: str) -> ReferenceReplica:
        """The replica of ``source``, created empty when new."""
        return self.replicas.setdefault(source, ReferenceReplica(source))

    def set_meta(self, source: str, meta: Mapping[str, Any]) -> None:
        """Take page size, window and ``swa_events`` from an (already validated) meta."""
        replica = self.replica(source)
        replica.page_size = meta["page_size"]
        replica.sliding_window_size = meta["sliding_window_size"]
        replica.swa_events = meta.get("swa_events", True) is not False

    def apply(self, batch: EventBatch) -> None:
        """Apply one batch: meta first, then each event until one does not fit."""
        if batch.meta is not None:
            self.set_meta(batch.source, batch.meta)
        self.apply_events(batch.source, batch.events)

    def apply_events(self, source: str, events: Iterable[Event]) -> None:
        """Apply ``events`` to ``source`` in order."""
        replica = self.replica(source)
        for event in events:
            replica.apply(event)

    def mark_diverged(self, source: str, reason: str) -> None:
        """Answer unknown for ``source`` until it is cleared (the first reason is kept)."""
        replica = self.replica(source)
        if replica.diverged is None:
            replica.diverged = reason

    def match(
        self, token_ids: Sequence[int], extra_key: str | None = None
    ) -> dict[str, tuple[int | None, int | None]]:
        """Per source, (held tokens, SWA-usable tokens) of ``token_ids``; (None, None) when the
        source's state is unknown; usable None when its stream reports no tombstones."""
        prior = namespace_prior(extra_key)
        result: dict[str, tuple[int | None, int | None]] = {}
        for source, replica in self.replicas.items():
            if replica.diverged is not None:
                result[source] = (None, None)
                continue
            if not replica.blocks:
                continue
            if replica.page_size is None or replica.sliding_window_size is None:
                result[source] = (None, None)
                continue
            page_size = replica.page_size
            held = []
            for block_hash in chain_block_hashes(prior, token_ids, page_size):
                block = replica.blocks.get(block_hash)
                if block is None:
                    break
                held.append((page_size, block.swa_resident))
            walked, usable = usable_prefix(held, replica.sliding_window_size)
            if walked:
                usable_tokens = usable * page_size if replica.swa_events else None
                result[source] = (walked * page_size, usable_tokens)
        return result
