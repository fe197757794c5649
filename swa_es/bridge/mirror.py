"""``MirrorCache``: an engine's blocks, re-keyed into our hashes, as a ``PublishedCache``.

Engines name blocks by their own hashes (sglang's equal ours; vLLM's depend on its hash
function and seed). The mirror recomputes each stored page's hash our way (docs/design.md §4: the
parent's 32-byte digest chained with the page's tokens; the root of a LoRA name or cache salt
starts from ``sha256(name)``), remembers engine hash -> our block, and turns every engine
event into our events, so ``PrefixIndex.match`` finds an engine's blocks from token ids alone.
Pages carrying vLLM extra keys a token-only query cannot know (multimodal items, salts,
embeddings) are chained with those keys too, so no query ever matches them by tokens alone.
Events on a lower tier (CPU, storage, ...) go to a ``TierBook`` (``swa_es.bridge.tiers``), which
places them on our blocks by hash and decides every removal's reason (evicted or demoted).

SWA residency. A plain engine says nothing about sliding-window residency: every block is
"resident" here and the epoch's meta says ``"swa_events": false`` with the reason in
``"swa_residency"`` (``PrefixIndex`` then reports usable lengths as unknown). Two kinds of
engine do report it, and their tombstones and restores become ``BlockSWAEvicted`` /
``BlockSWARestored``:

- ``EngineSWAResidency`` events (sglang with ``swa_es.integrations.sglang``): the window is the
  events' own (sglang's ``match_prefix`` applies the rule of docs/design.md §3 as it is);
- vLLM's per-group events (``group_idx``): a ``GroupLedger`` counts copies per (hash, group); a
  block is held while every full-attention group holds a copy and SWA-resident while every
  sliding-window group does (a block no such group holds is a tombstone from its store on); the
  rule window is ``vllm_groups.rule_window`` of vLLM's, so that the SWA rule is vLLM's hybrid
  hit rule. Sliding-window stores are read for their hashes only (vLLM sends them sparse:
  tokens and parent describe the request's span, not the hashes), each hash checked to line up
  with its block of the span.

From the first such event on, the meta says ``"swa_events": true`` with that window
(``meta_stale`` tells the bridge to open an epoch with the new meta). A ``Publisher`` drives it
like any cache: ``take_events``, ``snapshot_events``, ``state_digest``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    StateDigest,
    digest_to_block_hash,
    namespace_prior,
)
from swa_es.bridge.errors import MirrorError
from swa_es.bridge.formats import (
    BlockKey,
    EngineCleared,
    EngineEvent,
    EngineRemoved,
    EngineStored,
    EngineSWAResidency,
)
from swa_es.bridge.pages import Page, engine_page_digest
from swa_es.bridge.tiers import DEFAULT_RECENT_PAGES, TierBook, TierHost, is_device
from swa_es.bridge.vllm_groups import (
    Group,
    GroupLedger,
    GroupRole,
    rule_window,
)

__all__ = ["MirrorCache", "MirrorCounters", "MirrorError"]
SWA_RESIDENCY_EVENTS: Final = "events"
"""``meta.swa_residency`` of a source whose stream reports SWA residency."""
NO_RESIDENCY_YET: Final = (
    "none: the engine has reported no SWA residency (no SWA residency event in this epoch)"
)


@dataclass(slots=True)
class _Block:
    our_hash: int
    digest: bytes
    parent: BlockKey | None
    our_parent: int | None
    tokens: tuple[int, ...]
    depth: int
    resident: bool = True
    children: int = 0


@dataclass(slots=True)
class MirrorCounters:
    """What the mirror skipped, and why (``other_medium``: SWA residency events of a lower
    tier; the tiers' own counters are ``MirrorCache.tiers.counters``)."""

    other_medium: int = 0
    other_group: int = 0
    other_block_size: int = 0
    repeated_stores: int = 0
    opaque_blocks: int = 0


class MirrorCache:
    """See the module docstring. ``page_size`` is learned from the first stored page;
    ``recent_pages`` bounds the memory of engine hashes removed from every tier (see
    ``swa_es.bridge.tiers``)."""

    device: Final = "engine"

    def __init__(self, *, recent_pages: int = DEFAULT_RECENT_PAGES) -> None:
        self._blocks: dict[BlockKey, _Block] = {}
        # vLLM with several full-attention groups: blocks some but not all of them hold.
        self._unpublished: dict[BlockKey, _Block] = {}
        self._events: list[Event] = []
        self._evicted: list[int] = []
        self._restored: list[int] = []
        self._flipped: dict[int, tuple[_Block, bool]] = {}  # our hash -> (block, resident before)
        self._digest = StateDigest()
        self._page_size: int | None = None
        self._window: int | None = None
        self._ledger = GroupLedger()
        self._grouped = False
        self._swa_modeled = False
        self._rule_window: int | None = None
        self._published_meta: BatchMeta | None = None
        self.counters = MirrorCounters()
        self.tiers = TierBook(
            TierHost(
                gpu_page=self._gpu_page,
                page_size_fits=self._learn_page_size,
                group_role=self._group_role,
                full_groups=self._full_groups,
                emit=self._emit,
                digest=self._digest,
            ),
            recent_pages,
        )

    # --- PublishedCache ---------------------------------------------------------------------

    @property
    def page_size(self) -> int:
        """Tokens per block (0 until the first block is stored)."""
        return self._page_size or 0

    @property
    def sliding_window_size(self) -> int:
        """The SWA rule's window for this source (0: unknown)."""
        return self._residency()[0] or self._window or 0

    def take_events(self) -> list[Event]:
        """Our events since the last call, each removal with its reason (so: called once the
        engine batch is applied)."""
        events, self._events = self._events, []
        return self.tiers.with_reasons(events)

    def snapshot_events(self) -> list[Event]:
        """Every block as ``BlockStored``, parents before children (insertion order), then one
        ``BlockSWAEvicted`` naming every tombstone, then each lower tier's blocks."""
        size = self.page_size
        events: list[Event] = [
            BlockStored(
                block_hashes=(block.our_hash,),
                parent_block_hash=block.our_parent,
                token_ids=block.tokens,
                block_size=size,
            )
            for block in self._blocks.values()
        ]
        tombstones = tuple(block.our_hash for block in self._blocks.values() if not block.resident)
        if tombstones:
            events.append(BlockSWAEvicted(block_hashes=tombstones))
        events.extend(self.tiers.snapshot_events())
        return events

    def state_digest(self) -> str:
        """The digest a replica of these blocks has."""
        return self._digest.hexdigest()

    # --- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._blocks)

    def our_hash(self, engine_hash: BlockKey) -> int | None:
        """Our hash of an engine block, None when not held."""
        block = self._blocks.get(engine_hash)
        return None if block is None else block.our_hash

    def resident(self, engine_hash: BlockKey) -> bool | None:
        """Whether a held engine block keeps its SWA KV (None when not held)."""
        block = self._blocks.get(engine_hash)
        return None if block is None else block.resident

    @property
    def groups(self) -> tuple[Group, ...]:
        """The vLLM KV-cache groups the engine declared (none for an engine without groups)."""
        return self._ledger.groups

    @property
    def swa_residency(self) -> str:
        """``"events"`` when the engine reports SWA residency, else ``"none: <reason>"``."""
        return self._residency()[1]

    def _residency(self) -> tuple[int | None, str]:
        """(the SWA rule's window, ``swa_residency``)."""
        if self._grouped:
            window, why = self._ledger.residency()
            return (None if window is None else rule_window(window)), why
        if self._rule_window is not None:
            return self._rule_window, SWA_RESIDENCY_EVENTS
        return None, NO_RESIDENCY_YET

    def meta(self, page_size: int | None = None) -> BatchMeta:
        """The epoch meta of a bridged source (``page_size`` when none was learned yet).

        With SWA residency reported, ``swa_events`` is true and ``sliding_window_size`` is the
        window the SWA rule of docs/design.md §3 applies to this source (for vLLM's groups,
        ``rule_window`` of the engine's, which ``engine_sliding_window`` keeps). Without,
        ``swa_events: false`` makes consumers report SWA-usable lengths as unknown
        (``swa_residency`` says why); the window is then the one vLLM reported, else the page
        size as a placeholder that such consumers never use (``sliding_window_known`` says
        which). An unknown epoch opened before any block was seen carries page size 1
        (``page_size_known`` false); followers never apply it. The meta returned is the one
        ``meta_stale`` compares with.
        """
        size = self._page_size or page_size
        window, why = self._residency()
        extra: dict[str, Any] = {
            "sliding_window_known": window is not None or self._window is not None,
            "page_size_known": size is not None,
            "swa_residency": why,
        }
        engine_windows = {g.window for g in self.groups if g.role is GroupRole.SLIDING_WINDOW}
        if window is not None and self._grouped and len(engine_windows) == 1:
            extra["engine_sliding_window"] = engine_windows.pop()
        meta = BatchMeta(
            page_size=size or 1,
            sliding_window_size=window or self._window or size or 1,
            digest_alg=DIGEST_ALGORITHM,
            swa_events=window is not None,
            device=self.device,
            producer="swa-es bridge",
            extra=extra,
        )
        self._published_meta = meta
        return meta

    @property
    def meta_stale(self) -> bool:
        """Whether the engine's events changed how its batches must be read (it reported SWA
        residency, or a group that changes its rule, since ``meta()`` was last taken): the
        bridge opens a new epoch."""
        published = self._published_meta
        if published is None:
            return False
        window, why = self._residency()
        return (
            published.swa_events != (window is not None)
            or published.extra.get("swa_residency") != why
            or (window is not None and published.sliding_window_size != window)
        )

    # --- applying engine events -------------------------------------------------------------

    def clear(self) -> None:
        """Forget every block, every tier's too (emits ``AllBlocksCleared``); the engine's
        declarations stay."""
        for blocks in (self._blocks, self._unpublished):
            for key, block in blocks.items():
                self.tiers.forget(key, _page(block))
        self.tiers.clear()
        self._blocks.clear()
        self._unpublished.clear()
        self._ledger.clear()
        self._digest.clear()
        self._evicted.clear()
        self._restored.clear()
        self._flipped.clear()
        self._events.append(AllBlocksCleared())

    def reset(self) -> None:
        """Forget every block, every pending event and what the engine declared (its groups,
        its window): a new engine run, or a new epoch after the state was lost. The page size
        stays."""
        self.tiers.reset()
        self._blocks.clear()
        self._unpublished.clear()
        self._digest.clear()
        self._events.clear()
        self._evicted.clear()
        self._restored.clear()
        self._flipped.clear()
        self._ledger = GroupLedger()
        self._grouped = self._swa_modeled = False
        self._rule_window = None
        self._published_meta = None

    def apply(self, event: EngineEvent) -> None:
        """Translate one engine event; ``MirrorError`` when it cannot be done exactly."""
        match event:
            case EngineStored():
                if not is_device(event.medium):
                    self.tiers.store(event)
                elif event.group_idx is not None:
                    self._grouped = True
                    self._store_grouped(event, event.group_idx)
                else:
                    self._store(event)
            case EngineRemoved():
                if not is_device(event.medium):
                    self.tiers.remove(event)
                elif event.group_idx is not None:
                    self._remove_grouped(event, event.group_idx)
                else:
                    self._remove(event)
            case EngineCleared():
                self.clear()
            case EngineSWAResidency():
                if not is_device(event.medium):
                    self.counters.other_medium += 1
                else:
                    self._residency_event(event)
        self._flush_residency()

    # --- what the tier book reads ---------------------------------------------------------------

    def _gpu_page(self, key: BlockKey) -> Page | None:
        block = self._content(key)
        return None if block is None else _page(block)

    def _group_role(self, idx: int | None) -> GroupRole | None:
        if idx is None:
            return None if self._grouped else GroupRole.FULL
        declared = self._ledger.declared(idx)
        return None if declared is None else declared.role

    def _full_groups(self) -> tuple[int | None, ...]:
        if not self._grouped:
            return (None,)
        return tuple(g.idx for g in self._ledger.groups if g.role is GroupRole.FULL)

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    # --- stores -------------------------------------------------------------------------------

    def _content(self, key: BlockKey) -> _Block | None:
        block = self._blocks.get(key)
        return self._unpublished.get(key) if block is None else block

    def _chain_start(self, event: EngineStored) -> tuple[bytes, int | None, int]:
        """(prior digest, our parent hash, depth) for the event's first page."""
        parent_key = event.parent_block_hash
        if parent_key is None:
            return namespace_prior(event.namespace), None, 0
        parent = self._content(parent_key)
        if parent is None:
            raise MirrorError(
                "parent_block_hash", f"BlockStored names parent {parent_key!r}, not held"
            )
        return parent.digest, parent.our_hash, parent.depth + 1

    def _page(self, event: EngineStored, index: int, prior: bytes) -> tuple[tuple[int, ...], bytes]:
        size = event.block_size
        tokens = event.token_ids[index * size : (index + 1) * size]
        extra = None if event.extra_keys is None else event.extra_keys[index]
        if extra is not None:
            self.counters.opaque_blocks += 1
        return tokens, engine_page_digest(prior, tokens, extra)

    def _learn_page_size(self, event: EngineStored) -> bool:
        """Whether the event's pages are of the mirror's page size (the first store sets it)."""
        if self._page_size is None:
            self._page_size = event.block_size
            if event.sliding_window is not None and event.sliding_window > 0:
                self._window = event.sliding_window
        elif event.block_size != self._page_size:
            self.counters.other_block_size += 1
            return False
        return True

    def _store(self, event: EngineStored) -> None:
        """A store of an engine without groups (sglang): a set of blocks."""
        if not self._learn_page_size(event):
            return
        prior, our_parent, depth = self._chain_start(event)
        parent_key = event.parent_block_hash
        new_hashes: list[int] = []
        new_tokens: list[int] = []
        first_parent = our_parent
        for index, key in enumerate(event.block_hashes):
            tokens, digest = self._page(event, index, prior)
            held = self._blocks.get(key)
            if held is not None:
                where = f"block_hashes[{index}]"
                if held.digest != digest:
                    raise MirrorError(where, f"BlockStored re-stores {key!r} with other content")
                self.counters.repeated_stores += 1
                if new_hashes:
                    raise MirrorError(where, f"BlockStored stores held {key!r} below a new one")
                first_parent = held.our_hash
            else:
                our_hash = digest_to_block_hash(digest)
                block = _Block(our_hash, digest, parent_key, our_parent, tokens, depth)
                self._blocks[key] = block
                if parent_key is not None:
                    self._blocks[parent_key].children += 1
                self._digest.add(our_hash, our_parent, True)
                new_hashes.append(our_hash)
                new_tokens.extend(tokens)
            our_parent = self._blocks[key].our_hash
            prior, parent_key, depth = digest, key, depth + 1
        if new_hashes:
            self._events.append(
                BlockStored(
                    block_hashes=tuple(new_hashes),
                    parent_block_hash=first_parent,
                    token_ids=tuple(new_tokens),
                    block_size=event.block_size,
                )
            )

    def _store_grouped(self, event: EngineStored, idx: int) -> None:
        """A store of one vLLM KV-cache group (see ``vllm_groups``)."""
        new_group = idx not in {g.idx for g in self._ledger.groups}
        group = self._ledger.declare(idx, event.group_kind, event.sliding_window, event.block_size)
        if new_group:
            self._groups_changed()
        if group.role is GroupRole.FULL:
            if self._learn_page_size(event):
                self._store_full(event, group)
        elif group.role is GroupRole.SLIDING_WINDOW:
            self._store_window(event, group)
        else:
            self.counters.other_group += 1
            for key in event.block_hashes:
                self._ledger.add(group, key)

    def _store_full(self, event: EngineStored, group: Group) -> None:
        """A full-attention group's store: dense, a chain of pages under its parent."""
        prior, our_parent, depth = self._chain_start(event)
        parent_key = event.parent_block_hash
        for index, key in enumerate(event.block_hashes):
            tokens, digest = self._page(event, index, prior)
            block = self._content(key)
            if block is None:
                our_hash = digest_to_block_hash(digest)
                block = _Block(our_hash, digest, parent_key, our_parent, tokens, depth)
                self._unpublished[key] = block
            elif block.digest != digest:
                where = f"block_hashes[{index}]"
                raise MirrorError(where, f"BlockStored re-stores {key!r} with other content")
            elif self._ledger.copies(group, key):
                self.counters.repeated_stores += 1
            self._ledger.add(group, key)
            if key in self._unpublished and self._ledger.held_by_all(GroupRole.FULL, key):
                self._publish(key, f"block_hashes[{index}]")
            our_parent = block.our_hash
            prior, parent_key, depth = digest, key, depth + 1

    def _store_window(self, event: EngineStored, group: Group) -> None:
        """A sliding-window group's store: only its hashes count. vLLM sends token_ids for the
        request's whole span and the logical parent, but hashes only for the blocks it keeps
        (none for most decode blocks): each hash must be a full-attention block lying in that
        span, in order, with the span's tokens at its place."""
        size = event.block_size
        span = len(event.token_ids) // size
        if len(event.block_hashes) > span:
            raise MirrorError(
                "block_hashes",
                f"{len(event.block_hashes)} hash(es) for a span of {span} block(s)",
            )
        parent_key = event.parent_block_hash
        parent = None if parent_key is None else self._content(parent_key)
        first = 0 if parent_key is None else None if parent is None else parent.depth + 1
        last = -1
        for index, key in enumerate(event.block_hashes):
            where = f"block_hashes[{index}]"
            block = self._content(key)
            if block is None:
                raise MirrorError(where, f"{key!r} is no block of the full-attention group(s)")
            if first is None:  # the span's start is unknown: its order still must hold
                offset = block.depth
            else:
                offset = block.depth - first
                at = event.token_ids[offset * size : (offset + 1) * size]
                if not 0 <= offset < span or at != block.tokens:
                    raise MirrorError(
                        where, f"{key!r} does not line up with token_ids (block {offset} of span)"
                    )
            if offset <= last:
                raise MirrorError(where, f"{key!r} is out of order in the span")
            last = offset
        for key in event.block_hashes:
            self._ledger.add(group, key)
            if key in self._blocks:
                self._refresh(key)

    def _publish(self, key: BlockKey, field: str) -> None:
        """A block every full-attention group now holds enters the replica."""
        block = self._unpublished[key]
        if block.parent is not None:
            parent = self._blocks.get(block.parent)
            if parent is None:
                raise MirrorError(field, f"{key!r} is held, its parent {block.parent!r} is not")
            parent.children += 1
        del self._unpublished[key]
        block.resident = self._swa_target(key)
        self._blocks[key] = block
        self._digest.add(block.our_hash, block.our_parent, block.resident)
        self._events.append(
            BlockStored(
                block_hashes=(block.our_hash,),
                parent_block_hash=block.our_parent,
                token_ids=block.tokens,
                block_size=self.page_size,
            )
        )
        if not block.resident:
            self._evicted.append(block.our_hash)

    # --- removals -----------------------------------------------------------------------------

    def _remove(self, event: EngineRemoved) -> None:
        """A removal by an engine without groups (sglang)."""
        self._check_removable(event.block_hashes)
        removed: list[_Block] = []
        for key in event.block_hashes:
            block = self._blocks.pop(key)
            if block.parent is not None and block.parent in self._blocks:
                self._blocks[block.parent].children -= 1
            self._digest.remove(block.our_hash, block.our_parent, block.resident)
            self.tiers.forget(key, _page(block))
            removed.append(block)
        removed.sort(key=lambda block: block.depth)  # parents first: the reasons may split it
        self._events.append(BlockRemoved(block_hashes=tuple(b.our_hash for b in removed)))

    def _check_removable(self, keys: tuple[BlockKey, ...]) -> None:
        """Every block held, and none keeps a child outside ``keys`` (a replica holds no
        orphan): checked before anything changes."""
        leaving = set(keys)
        children_leaving: dict[BlockKey, int] = {}
        for index, key in enumerate(keys):
            block = self._blocks.get(key)
            if block is None:
                raise MirrorError(f"block_hashes[{index}]", f"BlockRemoved names {key!r}, not held")
            if block.parent in leaving:
                children_leaving[block.parent] = children_leaving.get(block.parent, 0) + 1
        for index, key in enumerate(keys):
            if self._blocks[key].children != children_leaving.get(key, 0):
                raise MirrorError(
                    f"block_hashes[{index}]", f"BlockRemoved removes {key!r} below held blocks"
                )

    def _remove_grouped(self, event: EngineRemoved, idx: int) -> None:
        """A removal of one copy per hash from one vLLM KV-cache group."""
        group = self._ledger.group(idx)
        for index, key in enumerate(event.block_hashes):
            where = f"block_hashes[{index}]"
            self._ledger.drop(group, key, where)
            if group.role is GroupRole.FULL:
                if key in self._blocks and not self._ledger.held_by_all(GroupRole.FULL, key):
                    self._unpublish(key, where)
                if key in self._unpublished and not self._ledger.held_by_any(GroupRole.FULL, key):
                    self.tiers.forget(key, _page(self._unpublished.pop(key)))
            elif group.role is GroupRole.SLIDING_WINDOW and key in self._blocks:
                self._refresh(key)

    def _unpublish(self, key: BlockKey, field: str) -> None:
        block = self._blocks[key]
        if block.children:
            raise MirrorError(field, f"BlockRemoved removes {key!r} below held blocks")
        del self._blocks[key]
        if block.parent is not None:
            self._blocks[block.parent].children -= 1
        self._digest.remove(block.our_hash, block.our_parent, block.resident)
        self._events.append(BlockRemoved(block_hashes=(block.our_hash,)))
        block.resident = True
        self._unpublished[key] = block

    # --- SWA residency ----------------------------------------------------------------------

    def _swa_target(self, key: BlockKey) -> bool:
        """Whether a held block is SWA-resident by the groups' copies (always, unmodeled)."""
        return not self._swa_modeled or self._ledger.held_by_all(GroupRole.SLIDING_WINDOW, key)

    def _refresh(self, key: BlockKey) -> None:
        block = self._blocks[key]
        resident = self._swa_target(key)
        if resident != block.resident:
            self._flip(block, resident)

    def _flip(self, block: _Block, resident: bool) -> None:
        self._flipped.setdefault(block.our_hash, (block, block.resident))
        block.resident = resident
        self._digest.set_residency(block.our_hash, block.our_parent, resident)

    def _groups_changed(self) -> None:
        """A new group changes which blocks are held (a full-attention one holds none yet),
        which are SWA-resident (so does a sliding-window one) and maybe whether residency is
        modeled at all: every block is re-read, children first."""
        for key in reversed(list(self._blocks)):
            if not self._ledger.held_by_all(GroupRole.FULL, key):
                self._unpublish(key, "group_idx")
        self._swa_modeled = self._residency()[0] is not None
        for key in self._blocks:
            self._refresh(key)
        self.tiers.regroup()

    def _flush_residency(self) -> None:
        """One ``BlockSWAEvicted`` and one ``BlockSWARestored`` for the event's net changes (a
        block flipped there and back within one engine event is left out)."""
        for block, before in self._flipped.values():
            if block.resident != before:
                (self._restored if block.resident else self._evicted).append(block.our_hash)
        self._flipped.clear()
        if self._evicted:
            self._events.append(BlockSWAEvicted(block_hashes=tuple(self._evicted)))
            self._evicted.clear()
        if self._restored:
            self._events.append(BlockSWARestored(block_hashes=tuple(self._restored)))
            self._restored.clear()

    def declare_window(self, window: int, field: str) -> None:
        """The window (tokens) the SWA rule applies to this source; one per epoch, so a
        different one is a ``MirrorError`` naming ``field``."""
        if type(window) is not int or window <= 0:
            raise MirrorError(field, f"expected a positive window, got {window!r}")
        if self._rule_window is None:
            self._rule_window = window
        elif window != self._rule_window:
            raise MirrorError(
                field, f"window {window} differs from {self._rule_window} earlier in this epoch"
            )

    def set_residency(self, keys: tuple[BlockKey, ...], resident: bool, field: str) -> None:
        """Tombstone (``resident`` False) or restore held blocks; one event for those that
        change. ``MirrorError`` naming ``field[i]`` for a block not held, before any change."""
        blocks: list[_Block] = []
        for index, key in enumerate(keys):
            block = self._blocks.get(key)
            if block is None:
                raise MirrorError(f"{field}[{index}]", f"block {key!r} is not held")
            blocks.append(block)
        for block in blocks:
            if block.resident != resident:
                self._flip(block, resident)

    def _residency_event(self, event: EngineSWAResidency) -> None:
        if self._grouped:
            raise MirrorError("type", "SWA residency events from an engine with vLLM groups")
        self.declare_window(event.sliding_window_size, "sliding_window_size")
        self.set_residency(event.block_hashes, event.resident, "block_hashes")


def _page(block: _Block) -> Page:
    return Page(block.our_hash, block.our_parent, block.tokens, block.digest)
