"""The pure-Python twin of the native replica store: the readable reference and test oracle.

Imported only by tests (differential tests hold ``cache.events.replica_store`` equal to it);
never selected at run time. What an event does to a source's blocks and its digest is
``swa_es.testing.BlockModel``'s (one Python model of it); this replica adds what the native
store checks before it lets an event change anything, worded exactly as the native store words
it, with a child count per block, and a replica that keeps token ids (``keep_tokens``, the native
store's default) refuses a store whose writer withheld them. Each event is checked in full
before anything changes, so a
failing event leaves the replica as it was (events before it in the batch stay applied). An event
type without checks of its own here needs each block it names to be held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cache.events.digest import StateDigest
from cache.events.hashing import chain_block_hashes, namespace_prior
from cache.events.replica_store import ReplicaConsistencyError
from cache.events.types import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    EventBatch,
)
from swa_es.testing import BlockModel, ModelBlock
from tests.oracles.swa_rule import usable_prefix


@dataclass
class ReferenceReplica:
    """One source's replica: its blocks are ``model``'s (a repeated SWA residency is allowed)."""

    source: str
    page_size: int | None = None
    sliding_window_size: int | None = None
    swa_events: bool = True
    keep_tokens: bool = True
    diverged: str | None = None
    block_size: int | None = None
    model: BlockModel = field(default_factory=lambda: BlockModel(strict_residency=False))
    children: dict[int, int] = field(default_factory=dict)

    @property
    def blocks(self) -> dict[int, ModelBlock]:
        """The held blocks by hash."""
        return self.model.blocks

    @property
    def digest(self) -> StateDigest:
        """The state digest of the held blocks."""
        return self.model.digest

    @property
    def tombstone_count(self) -> int:
        """Blocks held as tombstones."""
        return sum(not block.resident for block in self.blocks.values())

    def fail(self, reason: str) -> ReplicaConsistencyError:
        """The error for an event that does not fit."""
        return ReplicaConsistencyError(self.source, reason)

    def clear(self) -> None:
        """Drop every block and end a divergence."""
        self.apply(AllBlocksCleared())

    def apply(self, event: Event) -> None:
        """Apply one event, or raise and change nothing."""
        before = _BEFORE.get(type(event), ReferenceReplica._check_held)
        before(self, event)
        self.model.apply(event)

    def _check_held(self, event: Event) -> None:
        blocks = self.model.blocks
        for block_hash in getattr(event, "block_hashes", ()):
            if block_hash not in blocks:
                raise self.fail(f"{type(event).__name__} names unknown block {block_hash}")

    def _store(self, event: Event) -> None:
        assert isinstance(event, BlockStored)
        size, hashes = event.block_size, event.block_hashes
        if self.keep_tokens and not event.token_ids and event.medium in (None, MEDIUM_GPU):
            raise self.fail(
                f"BlockStored for block {hashes[0]} has no token ids (withheld by the writer: a "
                "token-free source), and this replica keeps token ids"
            )
        if self.block_size is None and self.page_size is not None and self.page_size != size:
            raise self.fail(f"block_size {size} differs from meta.page_size {self.page_size}")
        if self.block_size is not None and size != self.block_size:
            raise self.fail(f"block_size {size} differs from earlier {self.block_size}")
        parent, blocks = event.parent_block_hash, self.model.blocks
        if parent is not None and parent not in blocks:
            raise self.fail(f"BlockStored names unknown parent block {parent}")
        for block_hash in hashes:
            if block_hash in blocks:
                raise self.fail(f"BlockStored for block {block_hash}, which is already held")
        if len(set(hashes)) != len(hashes):
            raise self.fail("BlockStored names one block twice")
        self.block_size = size
        children = self.children
        for block_hash in hashes:
            if parent is not None:
                children[parent] += 1
            children[block_hash] = 0
            parent = block_hash

    def _remove(self, event: Event) -> None:
        assert isinstance(event, BlockRemoved)
        hashes, blocks = event.block_hashes, self.model.blocks
        seen: set[int] = set()
        for block_hash in hashes:
            if block_hash not in blocks or block_hash in seen:
                raise self.fail(f"BlockRemoved names unknown block {block_hash}")
            seen.add(block_hash)
        removed_children = dict.fromkeys(hashes, 0)
        for block_hash in hashes:
            parent = blocks[block_hash].parent
            if parent in removed_children:
                removed_children[parent] += 1
        for block_hash in hashes:
            if self.children[block_hash] != removed_children[block_hash]:
                raise self.fail(f"BlockRemoved for block {block_hash}, which still has children")
        for block_hash in hashes:
            parent = blocks[block_hash].parent
            if parent is not None and parent not in removed_children:
                self.children[parent] -= 1
            del self.children[block_hash]

    def _clear(self, event: Event) -> None:
        self.children = {}
        self.block_size = None
        self.diverged = None


_BEFORE: Final[dict[type[Event], Callable[[ReferenceReplica, Event], None]]] = {
    BlockStored: ReferenceReplica._store,
    BlockRemoved: ReferenceReplica._remove,
    AllBlocksCleared: ReferenceReplica._clear,
}
"""What the native store checks of an event type before the event changes anything (and the
child counts it keeps); any other type: each block it names is held."""


class ReferenceReplicaSet:
    """source -> ``ReferenceReplica``, with prefix matching (the oracle of both views)."""

    def __init__(self, *, keep_tokens: bool = True) -> None:
        self.replicas: dict[str, ReferenceReplica] = {}
        self.keep_tokens = keep_tokens

    def replica(self, source: str) -> ReferenceReplica:
        """The replica of ``source``, created empty when new."""
        replica = self.replicas.get(source)
        if replica is None:
            replica = self.replicas[source] = ReferenceReplica(source, keep_tokens=self.keep_tokens)
        return replica

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
            page_size, blocks = replica.page_size, replica.blocks
            held = []
            for block_hash in chain_block_hashes(prior, token_ids, page_size):
                block = blocks.get(block_hash)
                if block is None:
                    break
                held.append((page_size, block.resident))
            walked, usable = usable_prefix(held, replica.sliding_window_size)
            if walked:
                usable_tokens = usable * page_size if replica.swa_events else None
                result[source] = (walked * page_size, usable_tokens)
        return result
