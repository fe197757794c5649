"""``MirrorCache``: an engine's blocks, re-keyed into our hashes, as a ``PublishedCache``.

Engines name blocks by their own hashes (sglang's equal ours; vLLM's depend on its hash
function and seed). The mirror recomputes each stored page's hash our way (docs/design.md §4: the
parent's 32-byte digest chained with the page's tokens; the root of a LoRA name or cache salt
starts from ``sha256(name)``), remembers engine hash -> our block, and turns every engine
event into our events, so ``PrefixIndex.match`` finds an engine's blocks from token ids alone.
Pages carrying vLLM extra keys a token-only query cannot know (multimodal items, salts,
embeddings) are chained with those keys too, so no query ever matches them by tokens alone.

SWA residency. A plain engine says nothing about sliding-window residency: every block is
"resident" here and the epoch's meta says ``"swa_events": false`` with the reason in
``"swa_residency"`` (``PrefixIndex`` then reports usable lengths as unknown). An engine that does
report it (``EngineSWAResidency`` events: sglang with ``swa_es.integrations.sglang``) has its
tombstones and restores turned into ``BlockSWAEvicted`` / ``BlockSWARestored``, and from its
first such event on the meta says ``"swa_events": true`` with the engine's window
(``meta_stale`` tells the bridge to open an epoch with the new meta). A ``Publisher`` drives it
like any cache: ``take_events``, ``snapshot_events``, ``state_digest``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import msgpack

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
    page_digest,
)
from swa_es.bridge.formats import (
    BlockKey,
    EngineCleared,
    EngineEvent,
    EngineRemoved,
    EngineStored,
    EngineSWAResidency,
)

TRACKED_MEDIA: Final = frozenset({None, "GPU"})
"""Storage tiers the mirror follows; offload tiers (CPU, disk, ...) are not what a prefix
match on the engine can reuse."""
FULL_ATTENTION_KINDS: Final = frozenset({"full_attention", "mla_attention", "sink_full_attention"})
SWA_RESIDENCY_EVENTS: Final = "events"
"""``meta.swa_residency`` of a source whose stream reports SWA residency."""
NO_RESIDENCY_YET: Final = (
    "none: the engine has reported no SWA residency (no SWA residency event in this epoch)"
)
_OPAQUE_TAG: Final = b"swa-es/engine-extra-keys\x00"


class MirrorError(Exception):
    """An engine event the mirror cannot translate without guessing (the source is lost).

    ``field`` names the part of the event that does not fit (``group_idx``,
    ``kv_cache_spec_sliding_window``, ``block_hashes[3]``, ...), ``reason`` says why.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(slots=True)
class _Block:
    our_hash: int
    digest: bytes
    parent: BlockKey | None
    our_parent: int | None
    tokens: tuple[int, ...]
    resident: bool = True
    children: int = 0


@dataclass(slots=True)
class MirrorCounters:
    """What the mirror skipped, and why."""

    other_medium: int = 0
    other_group: int = 0
    other_block_size: int = 0
    repeated_stores: int = 0
    opaque_blocks: int = 0


class MirrorCache:
    """See the module docstring. ``page_size`` is learned from the first stored page."""

    device: Final = "engine"

    def __init__(self) -> None:
        self._blocks: dict[BlockKey, _Block] = {}
        self._events: list[Event] = []
        self._digest = StateDigest()
        self._page_size: int | None = None
        self._window: int | None = None
        self._group: int | None = None
        self._group_known = False
        self._rule_window: int | None = None
        self._published_meta: BatchMeta | None = None
        self.counters = MirrorCounters()

    # --- PublishedCache ---------------------------------------------------------------------

    @property
    def page_size(self) -> int:
        """Tokens per block (0 until the first block is stored)."""
        return self._page_size or 0

    @property
    def sliding_window_size(self) -> int:
        """The window the engine reported (0: unknown; plain sglang does not say)."""
        return self._rule_window or self._window or 0

    def take_events(self) -> list[Event]:
        """Our events since the last call."""
        events, self._events = self._events, []
        return events

    def snapshot_events(self) -> list[Event]:
        """Every block as ``BlockStored``, parents before children (insertion order), then one
        ``BlockSWAEvicted`` naming every tombstone."""
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
    def swa_residency(self) -> str:
        """``"events"`` when the engine reports SWA residency, else ``"none: <reason>"``."""
        return SWA_RESIDENCY_EVENTS if self._rule_window is not None else NO_RESIDENCY_YET

    def meta(self, page_size: int | None = None) -> BatchMeta:
        """The epoch meta of a bridged source (``page_size`` when none was learned yet).

        With SWA residency reported, ``swa_events`` is true and ``sliding_window_size`` is the
        window the SWA rule of docs/design.md §3 applies to this source. Without,
        ``swa_events: false`` makes consumers report SWA-usable lengths as unknown
        (``swa_residency`` says why); the window is then the one vLLM reported, else the page
        size as a placeholder that such consumers never use (``sliding_window_known`` says
        which). An unknown epoch opened before any block was seen carries page size 1
        (``page_size_known`` false); followers never apply it. The meta returned is the one
        ``meta_stale`` compares with.
        """
        size = self._page_size or page_size
        swa = self._rule_window is not None
        meta = BatchMeta(
            page_size=size or 1,
            sliding_window_size=self._rule_window or self._window or size or 1,
            digest_alg=DIGEST_ALGORITHM,
            swa_events=swa,
            device=self.device,
            producer="swa-es bridge",
            extra={
                "sliding_window_known": swa or self._window is not None,
                "page_size_known": size is not None,
                "swa_residency": self.swa_residency,
            },
        )
        self._published_meta = meta
        return meta

    @property
    def meta_stale(self) -> bool:
        """Whether the engine's events changed how its batches must be read (it reported SWA
        residency since ``meta()`` was last taken): the bridge opens a new epoch."""
        published = self._published_meta
        if published is None:
            return False
        return (
            published.swa_events != (self._rule_window is not None)
            or published.extra.get("swa_residency") != self.swa_residency
        )

    # --- applying engine events -------------------------------------------------------------

    def clear(self) -> None:
        """Forget every block (emits ``AllBlocksCleared``); the engine's window is kept."""
        self._blocks.clear()
        self._digest.clear()
        self._events.append(AllBlocksCleared())

    def reset(self) -> None:
        """Forget every block, every pending event and the SWA window (a new engine run, or a
        new epoch after the state was lost); the page size and the tracked group stay."""
        self._blocks.clear()
        self._digest.clear()
        self._events.clear()
        self._rule_window = None
        self._published_meta = None

    def apply(self, event: EngineEvent) -> None:
        """Translate one engine event; ``MirrorError`` when it cannot be done exactly."""
        match event:
            case EngineStored():
                self._store(event)
            case EngineRemoved():
                self._remove(event)
            case EngineCleared():
                self.clear()
            case EngineSWAResidency():
                self._residency(event)

    def _tracked_group(self, group_idx: int | None, kind: str | None) -> bool:
        if group_idx is None:
            return True
        if not self._group_known:
            if kind is not None and kind not in FULL_ATTENTION_KINDS:
                return False
            self._group, self._group_known = group_idx, True
        return group_idx == self._group

    def _store(self, event: EngineStored) -> None:
        if event.medium not in TRACKED_MEDIA:
            self.counters.other_medium += 1
            return
        if not self._tracked_group(event.group_idx, event.group_kind):
            self.counters.other_group += 1
            return
        if self._page_size is None:
            self._page_size = event.block_size
            if event.sliding_window is not None and event.sliding_window > 0:
                self._window = event.sliding_window
        elif event.block_size != self._page_size:
            self.counters.other_block_size += 1
            return
        size = event.block_size
        parent_key = event.parent_block_hash
        if parent_key is None:
            prior, our_parent = namespace_prior(event.namespace), None
        else:
            parent = self._blocks.get(parent_key)
            if parent is None:
                raise MirrorError(
                    "parent_block_hash", f"BlockStored names parent {parent_key!r}, not held"
                )
            prior, our_parent = parent.digest, parent.our_hash
        new_hashes: list[int] = []
        new_tokens: list[int] = []
        first_parent = our_parent
        for index, key in enumerate(event.block_hashes):
            tokens = event.token_ids[index * size : (index + 1) * size]
            extra = None if event.extra_keys is None else event.extra_keys[index]
            digest = _page_digest(prior, tokens, extra)
            if extra is not None:
                self.counters.opaque_blocks += 1
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
                self._blocks[key] = _Block(our_hash, digest, parent_key, our_parent, tokens)
                if parent_key is not None:
                    self._blocks[parent_key].children += 1
                self._digest.add(our_hash, our_parent, True)
                new_hashes.append(our_hash)
                new_tokens.extend(tokens)
            our_parent = self._blocks[key].our_hash
            prior, parent_key = digest, key
        if new_hashes:
            self._events.append(
                BlockStored(
                    block_hashes=tuple(new_hashes),
                    parent_block_hash=first_parent,
                    token_ids=tuple(new_tokens),
                    block_size=size,
                )
            )

    def _remove(self, event: EngineRemoved) -> None:
        if event.medium not in TRACKED_MEDIA:
            self.counters.other_medium += 1
            return
        if event.group_idx is not None and event.group_idx != self._group:
            self.counters.other_group += 1
            return
        self._check_removable(event.block_hashes)
        removed: list[int] = []
        for key in event.block_hashes:
            block = self._blocks.pop(key)
            if block.parent is not None and block.parent in self._blocks:
                self._blocks[block.parent].children -= 1
            self._digest.remove(block.our_hash, block.our_parent, block.resident)
            removed.append(block.our_hash)
        self._events.append(BlockRemoved(block_hashes=tuple(removed)))

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

    # --- SWA residency ----------------------------------------------------------------------

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
        changed: list[int] = []
        for block in blocks:
            if block.resident != resident:
                block.resident = resident
                self._digest.set_residency(block.our_hash, block.our_parent, resident)
                changed.append(block.our_hash)
        if changed:
            kind = BlockSWARestored if resident else BlockSWAEvicted
            self._events.append(kind(block_hashes=tuple(changed)))

    def _residency(self, event: EngineSWAResidency) -> None:
        self.declare_window(event.sliding_window_size, "sliding_window_size")
        self.set_residency(event.block_hashes, event.resident, "block_hashes")


def _page_digest(prior: bytes, tokens: tuple[int, ...], extra: Any) -> bytes:
    digest = page_digest(prior, tokens)
    if extra is None:
        return digest
    packed = msgpack.packb(extra, default=repr, use_bin_type=True)
    return hashlib.sha256(_OPAQUE_TAG + digest + packed).digest()
