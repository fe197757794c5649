"""Replica trees: per source, the blocks its primary holds, rebuilt from events.

The blocks live in the native core (``cache.events.replica_store.ReplicaStore``): per source,
compact arrays indexed by slot (hash, parent slot, child count and tombstone flag, and token ids
when kept) and an ordered open-addressing index from block hash to slot, about 27 bytes per page-1
block without token ids (4 more per token with them). Only the stream out reads token ids: a
``ReplicaSet(keep_tokens=False)`` keeps none (the same blocks, digests and prefix matches; a
block's ``token_ids`` is then None). The blocks an engine holds on a lower tier (its events'
``medium`` other than ``"GPU"``: host memory, storage) are kept per source and medium as sets of
block hashes beside it (``ReplicaTree.tiers``).
A follower hands decoded records over as ``WireBatch`` (``apply_wire``): the store reads them
natively, with no Python object per event. A snapshot is one checksummed bulk copy of the
arrays. When a ``PrefixIndex`` reads the set, the store also keeps a holder index (block hash ->
the sources holding it; about 18 bytes per distinct page-1 block). ``ReplicaSet`` and
``ReplicaTree`` are the Python face; the pure-Python twin that tests hold them equal to is
``tests.oracles.replica``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from cache.events import BatchMeta, DecodeError, Event, EventBatch, WireBatch
from cache.events.replica_store import (
    ReplicaConsistencyError,
    ReplicaSnapshotError,
    ReplicaStore,
)
from consumers.errors import ViewStateError
from consumers.views.view import LaneRole


@dataclass(frozen=True, slots=True)
class ReplicaBlock:
    """One block of a replica, as a plain value; ``token_ids`` is None when its set keeps no
    token ids (``ReplicaSet(keep_tokens=False)``)."""

    block_hash: int
    parent_block_hash: int | None
    token_ids: tuple[int, ...] | None
    swa_resident: bool


class ReplicaTree:
    """The blocks of one source: hash -> (parent, token ids, SWA residency).

    A handle on one source of a ``ReplicaSet`` (``ReplicaTree(source)`` alone makes a set of
    its own).
    """

    __slots__ = ("_owner", "source")

    def __init__(self, source: str, *, owner: ReplicaSet | None = None) -> None:
        self.source = source
        self._owner = owner if owner is not None else ReplicaSet()
        self._owner.store.add_source(source)

    @property
    def _store(self) -> ReplicaStore:
        return self._owner.store

    # --- reading --------------------------------------------------------------------------

    @property
    def meta(self) -> BatchMeta | None:
        """The source's meta, from its epoch's first batch (None until one arrives)."""
        return self._owner.meta_of(self.source)

    def __len__(self) -> int:
        return self._store.block_count(self.source)

    def __contains__(self, block_hash: object) -> bool:
        if type(block_hash) is not int or not -(1 << 63) <= block_hash < 1 << 63:
            return False
        return self._store.residency(self.source, block_hash) is not None

    @property
    def diverged(self) -> str | None:
        """Why this replica is diverged, or None when it is in sync."""
        return self._store.diverged(self.source)

    @property
    def tombstone_count(self) -> int:
        """Blocks whose SWA KV is freed (full KV kept)."""
        return self._store.tombstone_count(self.source)

    @property
    def block_size(self) -> int | None:
        """Tokens per block (None until the first block arrives)."""
        return self._store.block_size(self.source)

    def tiers(self) -> dict[str, int]:
        """The lower tiers (host memory, storage: any medium but the GPU) the source has
        reported, in the order first reported, with the blocks each holds now (0 for an emptied
        tier). The GPU's blocks are the tree itself."""
        return dict(self._store.tiers(self.source))

    def tier_blocks(self, medium: str) -> list[int]:
        """The block hashes the lower tier ``medium`` holds, sorted (empty for a medium the
        source never reported)."""
        return self._store.tier_blocks(self.source, medium)

    def tier_holds(self, medium: str, block_hash: int) -> bool:
        """Whether the lower tier ``medium`` holds ``block_hash``."""
        return self._store.tier_holds(self.source, medium, block_hash)

    def residency(self, block_hash: int) -> bool | None:
        """True: held and SWA-resident; False: held as a tombstone; None: not held."""
        return self._store.residency(self.source, block_hash)

    def block(self, block_hash: int) -> ReplicaBlock:
        """The block with ``block_hash``; ``KeyError`` when not held."""
        found = self._store.block(self.source, block_hash)
        if found is None:
            raise KeyError(block_hash)
        parent, token_ids, resident = found
        return ReplicaBlock(block_hash, parent, token_ids, resident)

    def blocks(self) -> Iterator[ReplicaBlock]:
        """Every block held, in no particular order."""
        for block_hash, parent, token_ids, resident in self._store.blocks(self.source):
            yield ReplicaBlock(block_hash, parent, token_ids, resident)

    def digest_value(self) -> str:
        """The digest of the blocks held, even while diverged (for checks, not for answers)."""
        return self._store.digest_value(self.source)

    def state_digest(self) -> str | None:
        """The state digest, equal to the primary's ``state_digest()`` when in sync; None while
        the source is diverged (its state is unknown, so there is nothing to compare)."""
        return self._store.state_digest(self.source)

    # --- changing -------------------------------------------------------------------------

    def mark_diverged(self, reason: str) -> None:
        """Answer "unknown" until the next ``AllBlocksCleared`` (the first reason is kept)."""
        self._store.mark_diverged(self.source, reason)

    def set_meta(self, meta: BatchMeta | Mapping[str, Any]) -> None:
        """Record the source's meta (page size, window) from an epoch's first batch."""
        self._owner.set_meta(self.source, meta)

    def apply_event(self, event: Event) -> None:
        """Apply one event; ``ReplicaConsistencyError`` (and no change) when it does not fit."""
        self._store.apply_events(self.source, (event,))

    def clear(self) -> None:
        """Drop every block; this also ends a divergence (the source starts over)."""
        self._store.clear(self.source)


class ReplicaSet:
    """The ``replicas`` view: source -> ``ReplicaTree``, all held in one native store.

    ``keep_tokens=False`` keeps no block's token ids: the same blocks, digests and prefix
    matches in less memory (a store's token count is still checked), for every reader but the
    stream out, which sends them.
    """

    lane_role: ClassVar[LaneRole | None] = LaneRole.REPLICAS

    def __init__(self, name: str = "replicas", *, keep_tokens: bool = True) -> None:
        self._name = name
        self._store = ReplicaStore(keep_tokens=keep_tokens)
        self._metas: dict[str, BatchMeta] = {}
        self._trees: dict[str, ReplicaTree] = {}

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    @property
    def store(self) -> ReplicaStore:
        """The native store (for views that read it, like ``PrefixIndex``)."""
        return self._store

    @property
    def keeps_tokens(self) -> bool:
        """Whether blocks keep their token ids (see the class docs)."""
        return self._store.keeps_tokens

    def meta_of(self, source: str) -> BatchMeta | None:
        """The meta of ``source`` (None until its epoch's first batch)."""
        return self._metas.get(source)

    def __getitem__(self, source: str) -> ReplicaTree:
        tree = self._trees.get(source)
        if tree is None:
            if not self._store.has_source(source):
                raise KeyError(source)
            tree = self._trees[source] = ReplicaTree(source, owner=self)
        return tree

    def __contains__(self, source: object) -> bool:
        return type(source) is str and self._store.has_source(source)

    def __iter__(self) -> Iterator[str]:
        return iter(self._store.sources())

    def __len__(self) -> int:
        return len(self._store.sources())

    def get(self, source: str) -> ReplicaTree | None:
        """The replica of ``source``, or None when the source was never seen."""
        if source not in self:
            return None
        return self[source]

    def sources(self) -> list[str]:
        """Every source seen, sorted."""
        return sorted(self._store.sources())

    def tree(self, source: str) -> ReplicaTree:
        """The replica of ``source``, created empty when new."""
        self._store.add_source(source)
        return self[source]

    def set_meta(self, source: str, meta: BatchMeta | Mapping[str, Any]) -> None:
        """Record ``source``'s meta (a plain mapping is checked first, as the decoder would);
        ``ReplicaConsistencyError`` when it is bad."""
        if not isinstance(meta, BatchMeta):
            try:
                meta = BatchMeta.from_dict(meta)
            except DecodeError as exc:
                raise ReplicaConsistencyError(source, str(exc)) from None
        self._store.set_meta(source, meta)
        self._metas[source] = meta

    def apply(self, batch: EventBatch) -> None:
        """Apply one in-order batch to its source's replica (meta first, then its events)."""
        source = batch.source
        if batch.meta is not None:
            self.set_meta(source, batch.meta)
        self._store.apply_events(source, batch.events)

    def apply_wire(self, batch: WireBatch) -> None:
        """``apply`` for a decoded record, read natively (no Python object per event); its meta
        is recorded as the decoder parsed it, with no second check."""
        if batch.meta is not None:
            self._store.set_wire_meta(batch)
            self._metas[batch.source] = batch.meta
        self._store.apply_wire(batch)

    def enable_prefix_index(self) -> None:
        """Keep the holder index that prefix matching reads from now on (``PrefixIndex`` calls
        this); it survives ``load``."""
        self._store.enable_prefix_index()

    @contextlib.contextmanager
    def prefix_index_deferred(self) -> Iterator[None]:
        """Within it, the holder index is not kept in step with each batch; it is built once
        from the replicas at the end, which costs a bulk replay less. A prefix match meanwhile
        builds it at once and it is kept from then on (always correct). No-op when no
        ``PrefixIndex`` reads this set, and when the replicas already hold blocks (the tail after
        a restored snapshot: keeping the index in step through it costs less than building it
        again from every block held)."""
        if not self._store.prefix_index_enabled() or self._holds_blocks():
            yield
            return
        self._store.disable_prefix_index()
        try:
            yield
        finally:
            self._store.enable_prefix_index()

    def _holds_blocks(self) -> bool:
        return any(self._store.block_count(source) for source in self._store.sources())

    def mark_diverged(self, source: str, reason: str) -> None:
        """Mark ``source``'s replica diverged until it is cleared by a resync."""
        self._store.mark_diverged(source, reason)

    def source_digest(self, source: str) -> str | None:
        """The digest of ``source``'s replica as held; None when the source was never seen or
        its digests cannot be verified (its meta names another algorithm, or none: records
        from before ``mix64-v1``)."""
        meta = self._metas.get(source)
        if meta is None or not meta.digest_verifiable:
            return None
        return self._store.digest_value(source)

    def snapshot(self) -> bytes:
        """Every replica, as the native store's checksummed bytes."""
        return self._store.snapshot()

    def load(self, data: bytes) -> None:
        """Replace every replica with the ones ``snapshot`` wrote; ``ViewStateError`` (and no
        change) when ``data`` is not such a snapshot, or holds no token ids while this set keeps
        them (they cannot be made up). A set that keeps none drops the snapshot's."""
        store = ReplicaStore(keep_tokens=self._store.keeps_tokens)
        if self._store.prefix_index_enabled():
            store.enable_prefix_index()  # the snapshot's, or rebuilt from the loaded blocks
        try:
            store.load(data)
        except ReplicaSnapshotError as exc:
            raise ViewStateError(self._name, exc.reason) from None
        metas: dict[str, BatchMeta] = {}
        for source in store.sources():
            meta_json = store.meta_json(source)
            if meta_json is None:
                continue
            try:
                metas[source] = BatchMeta.from_json(meta_json)
            except DecodeError as exc:
                raise ViewStateError(self._name, f"meta of {source!r}: {exc}") from None
        self._store, self._metas, self._trees = store, metas, {}
