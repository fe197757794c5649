"""Replica trees: per source, the blocks its primary holds, rebuilt from events.

A ``ReplicaTree`` keeps blocks in parallel arrays indexed by a slot number, with one dict from
block hash to slot. Per block that is the dict entry (key int, slot int), the parent hash
(8 bytes), a flag byte, a child count (4 bytes) and the page's token ids (4 bytes each): about
140 + 4 * page_size bytes. Freed slots are reused.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    StateDigest,
    block_term,
)
from consumers.errors import ViewConsistencyError, ViewStateError
from consumers.views.replica_codec import ReplicaState, decode_replica_states, encode_replica_states

_RESIDENT: Final = 1
_HAS_PARENT: Final = 2
_MASK: Final = (1 << 64) - 1
_ALWAYS_RESIDENT: Final = itertools.repeat(True)


@dataclass(frozen=True, slots=True)
class ReplicaBlock:
    """One block of a replica, as a plain value."""

    block_hash: int
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    swa_resident: bool


@dataclass(frozen=True, slots=True)
class SourceMeta:
    """What a consumer needs to interpret a source: from the ``meta`` of its epoch's first
    batch."""

    page_size: int
    sliding_window_size: int
    raw: Mapping[str, Any]

    @classmethod
    def parse(cls, source: str, meta: Mapping[str, Any]) -> SourceMeta:
        """Validate ``meta``; a missing or non-positive field raises ``ViewConsistencyError``."""
        values: list[int] = []
        for key in ("page_size", "sliding_window_size"):
            value = meta.get(key)
            if type(value) is not int or value <= 0:
                raise ViewConsistencyError(
                    source, f"meta.{key} must be a positive int, got {value!r}"
                )
            values.append(value)
        return cls(page_size=values[0], sliding_window_size=values[1], raw=dict(meta))


class ReplicaTree:
    """The blocks of one source: hash -> (parent, token ids, SWA residency), compactly."""

    __slots__ = (
        "_block_size",
        "_children",
        "_digest",
        "_diverged",
        "_flags",
        "_free",
        "_parents",
        "_slot_of",
        "_tokens",
        "_tombstones",
        "meta",
        "source",
    )

    def __init__(self, source: str) -> None:
        self.source = source
        self.meta: SourceMeta | None = None
        self._diverged: str | None = None
        self._reset_blocks()

    def _reset_blocks(self) -> None:
        self._slot_of: dict[int, int] = {}
        self._parents = array("q")
        self._flags = array("B")
        self._children = array("I")
        self._tokens = array("I")
        self._free = array("q")
        self._block_size: int | None = None
        self._digest = StateDigest()
        self._tombstones = 0

    # --- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._slot_of

    @property
    def diverged(self) -> str | None:
        """Why this replica is diverged, or None when it is in sync."""
        return self._diverged

    @property
    def tombstone_count(self) -> int:
        """Blocks whose SWA KV is freed (full KV kept)."""
        return self._tombstones

    @property
    def block_size(self) -> int | None:
        """Tokens per block (None until the first block arrives)."""
        return self._block_size

    def residency(self, block_hash: int) -> bool | None:
        """True: held and SWA-resident; False: held as a tombstone; None: not held."""
        slot = self._slot_of.get(block_hash)
        if slot is None:
            return None
        return bool(self._flags[slot] & _RESIDENT)

    def block(self, block_hash: int) -> ReplicaBlock:
        """The block with ``block_hash``; ``KeyError`` when not held."""
        slot = self._slot_of[block_hash]
        size = self._block_size or 0
        flags = self._flags[slot]
        return ReplicaBlock(
            block_hash=block_hash,
            parent_block_hash=self._parents[slot] if flags & _HAS_PARENT else None,
            token_ids=tuple(self._tokens[slot * size : (slot + 1) * size]),
            swa_resident=bool(flags & _RESIDENT),
        )

    def blocks(self) -> Iterator[ReplicaBlock]:
        """Every block held, in no particular order."""
        return (self.block(h) for h in list(self._slot_of))

    def digest_value(self) -> str:
        """The digest of the blocks held, even while diverged (for checks, not for answers)."""
        return self._digest.hexdigest()

    def state_digest(self) -> str | None:
        """The state digest, equal to the primary's ``state_digest()`` when in sync; None while
        the source is diverged (its state is unknown, so there is nothing to compare)."""
        if self._diverged is not None:
            return None
        return self._digest.hexdigest()

    # --- changing -------------------------------------------------------------------------

    def mark_diverged(self, reason: str) -> None:
        """Answer "unknown" until the next ``AllBlocksCleared`` (the first reason is kept)."""
        if self._diverged is None:
            self._diverged = reason

    def set_meta(self, meta: Mapping[str, Any]) -> None:
        """Record the source's meta (page size, window) from an epoch's first batch."""
        self.meta = SourceMeta.parse(self.source, meta)

    def apply_event(self, event: Event) -> None:
        """Apply one event; ``ViewConsistencyError`` when it refers to what is not held."""
        match event:
            case BlockStored():
                self._store(event)
            case BlockRemoved():
                self._remove(event.block_hashes)
            case BlockSWAEvicted():
                self._set_residency(event.block_hashes, resident=False)
            case BlockSWARestored():
                self._set_residency(event.block_hashes, resident=True)
            case AllBlocksCleared():
                self.clear()

    def clear(self) -> None:
        """Drop every block; this also ends a divergence (the source starts over)."""
        self._reset_blocks()
        self._diverged = None

    def _fail(self, reason: str) -> ViewConsistencyError:
        return ViewConsistencyError(self.source, reason)

    def _check_block_size(self, block_size: int) -> None:
        if self._block_size is None:
            if self.meta is not None and self.meta.page_size != block_size:
                raise self._fail(
                    f"block_size {block_size} differs from meta.page_size {self.meta.page_size}"
                )
            self._block_size = block_size
        elif block_size != self._block_size:
            raise self._fail(f"block_size {block_size} differs from earlier {self._block_size}")

    def _new_slot(self, parent: int | None, tokens: tuple[int, ...]) -> int:
        flags = _RESIDENT | (0 if parent is None else _HAS_PARENT)
        if self._free:
            slot = self._free.pop()
            self._parents[slot] = parent or 0
            self._flags[slot] = flags
            self._children[slot] = 0
            size = len(tokens)
            self._tokens[slot * size : (slot + 1) * size] = array("I", tokens)
            return slot
        self._parents.append(parent or 0)
        self._flags.append(flags)
        self._children.append(0)
        self._tokens.extend(tokens)
        return len(self._flags) - 1

    def _store(self, event: BlockStored) -> None:
        size = event.block_size
        self._check_block_size(size)
        slot_of = self._slot_of
        parent = event.parent_block_hash
        parent_slot = -1
        if parent is not None:
            found = slot_of.get(parent)
            if found is None:
                raise self._fail(f"BlockStored names unknown parent block {parent}")
            parent_slot = found
        hashes = event.block_hashes
        for block_hash in hashes:
            if block_hash in slot_of:
                raise self._fail(f"BlockStored for block {block_hash}, which is already held")
        if len(set(hashes)) != len(hashes):
            raise self._fail("BlockStored names one block twice")
        if parent_slot >= 0:
            self._children[parent_slot] += 1
        parents = (parent, *hashes[:-1])
        self._digest.value = (
            self._digest.value + sum(map(block_term, hashes, parents, _ALWAYS_RESIDENT))
        ) & _MASK
        if self._free:
            self._store_in_free_slots(hashes, parents, event.token_ids, size)
        else:
            self._store_appended(hashes, parents, event.token_ids)

    def _store_appended(
        self, hashes: tuple[int, ...], parents: tuple[int | None, ...], tokens: tuple[int, ...]
    ) -> None:
        start = len(self._flags)
        self._parents.extend([p or 0 for p in parents])
        self._flags.extend([_RESIDENT | _HAS_PARENT] * len(hashes))
        if parents[0] is None:
            self._flags[start] = _RESIDENT
        self._children.extend([1] * (len(hashes) - 1))
        self._children.append(0)
        self._tokens.extend(tokens)
        self._slot_of.update(zip(hashes, range(start, start + len(hashes)), strict=True))

    def _store_in_free_slots(
        self,
        hashes: tuple[int, ...],
        parents: tuple[int | None, ...],
        tokens: tuple[int, ...],
        size: int,
    ) -> None:
        for index, (block_hash, parent) in enumerate(zip(hashes, parents, strict=True)):
            slot = self._new_slot(parent, tokens[index * size : (index + 1) * size])
            self._children[slot] = 0 if index == len(hashes) - 1 else 1
            self._slot_of[block_hash] = slot

    def _remove(self, block_hashes: tuple[int, ...]) -> None:
        slot_of = self._slot_of
        removed: dict[int, int] = {}
        for block_hash in block_hashes:
            slot = slot_of.pop(block_hash, None)
            if slot is None:
                raise self._fail(f"BlockRemoved names unknown block {block_hash}")
            removed[block_hash] = slot
        for block_hash, slot in removed.items():
            flags = self._flags[slot]
            parent = self._parents[slot] if flags & _HAS_PARENT else None
            if parent is not None:
                parent_slot = slot_of.get(parent, removed.get(parent))
                if parent_slot is not None:
                    self._children[parent_slot] -= 1
            resident = bool(flags & _RESIDENT)
            self._digest.remove(block_hash, parent, resident)
            self._tombstones -= not resident
        for block_hash, slot in removed.items():
            if self._children[slot]:
                raise self._fail(f"BlockRemoved for block {block_hash}, which still has children")
            self._flags[slot] = 0
            self._free.append(slot)

    def _set_residency(self, block_hashes: tuple[int, ...], *, resident: bool) -> None:
        for block_hash in block_hashes:
            slot = self._slot_of.get(block_hash)
            if slot is None:
                kind = "BlockSWARestored" if resident else "BlockSWAEvicted"
                raise self._fail(f"{kind} names unknown block {block_hash}")
            flags = self._flags[slot]
            if bool(flags & _RESIDENT) == resident:
                continue  # already in that state: applying it again changes nothing
            self._flags[slot] = flags ^ _RESIDENT
            parent = self._parents[slot] if flags & _HAS_PARENT else None
            self._digest.set_residency(block_hash, parent, resident)
            self._tombstones += -1 if resident else 1

    # --- snapshot parts (see replica_codec) -----------------------------------------------

    def export_state(self) -> ReplicaState:
        """(header, arrays) that ``import_state`` turns back into this tree."""
        header = {
            "source": self.source,
            "meta": None if self.meta is None else dict(self.meta.raw),
            "block_size": self._block_size,
            "slots": len(self._flags),
            "live": len(self._slot_of),
            "free": len(self._free),
            "digest": self._digest.value,
            "tombstones": self._tombstones,
            "diverged": self._diverged,
        }
        keys = array("q", self._slot_of.keys())
        slots = array("q", self._slot_of.values())
        arrays = [keys, slots, self._parents, self._flags, self._children, self._tokens]
        return ReplicaState(header, [*arrays, self._free])

    @classmethod
    def import_state(cls, state: ReplicaState) -> ReplicaTree:
        """The tree ``export_state`` described (arrays already length-checked)."""
        header = state.header
        keys, slots, parents, flags, children, tokens, free = state.arrays
        tree = cls(header["source"])
        if header["meta"] is not None:
            tree.set_meta(header["meta"])
        tree._slot_of = dict(zip(keys, slots, strict=True))
        tree._parents, tree._flags, tree._children = parents, flags, children
        tree._tokens, tree._free = tokens, free
        tree._block_size = header["block_size"]
        tree._digest = StateDigest(header["digest"])
        tree._tombstones = header["tombstones"]
        tree._diverged = header["diverged"]
        return tree


class ReplicaSet:
    """The ``replicas`` view: source -> ``ReplicaTree``."""

    def __init__(self, name: str = "replicas") -> None:
        self._name = name
        self._trees: dict[str, ReplicaTree] = {}

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    def __getitem__(self, source: str) -> ReplicaTree:
        return self._trees[source]

    def __contains__(self, source: object) -> bool:
        return source in self._trees

    def __iter__(self) -> Iterator[str]:
        return iter(self._trees)

    def __len__(self) -> int:
        return len(self._trees)

    def get(self, source: str) -> ReplicaTree | None:
        """The replica of ``source``, or None when the source was never seen."""
        return self._trees.get(source)

    def sources(self) -> list[str]:
        """Every source seen, sorted."""
        return sorted(self._trees)

    def tree(self, source: str) -> ReplicaTree:
        """The replica of ``source``, created empty when new."""
        tree = self._trees.get(source)
        if tree is None:
            tree = self._trees[source] = ReplicaTree(source)
        return tree

    def apply(self, batch: EventBatch) -> None:
        """Apply one in-order batch to its source's replica."""
        tree = self.tree(batch.source)
        if batch.meta is not None:
            tree.set_meta(batch.meta)
        for event in batch.events:
            tree.apply_event(event)

    def mark_diverged(self, source: str, reason: str) -> None:
        """Mark ``source``'s replica diverged until it is cleared by a resync."""
        self.tree(source).mark_diverged(reason)

    def source_digest(self, source: str) -> str | None:
        """The digest of ``source``'s replica as held (None when never seen)."""
        tree = self._trees.get(source)
        return None if tree is None else tree.digest_value()

    def snapshot(self) -> bytes:
        """Every replica, in the binary form of ``consumers.views.replica_codec``."""
        return encode_replica_states([tree.export_state() for tree in self._trees.values()])

    def load(self, data: bytes) -> None:
        """Replace every replica with the ones ``snapshot`` wrote."""
        states = decode_replica_states(self._name, data)
        try:
            trees = [ReplicaTree.import_state(state) for state in states]
        except ViewConsistencyError as exc:
            raise ViewStateError(self._name, str(exc)) from None
        self._trees = {tree.source: tree for tree in trees}
