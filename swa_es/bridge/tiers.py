"""A bridged engine's lower storage tiers (CPU, storage, ...) as our events.

Engines that offload KV say where a block went: vLLM's ``medium`` ``CPU`` / ``STORAGE``,
sglang's ``CPU_PINNED`` / ``DISK`` / ``EXTERNAL``; any other name is kept as it is (and counted
as an unknown medium), never taken for the GPU. ``TierBook`` keeps, per medium, which of our
blocks the engine holds there, and turns the engine's tier events into ours: a
``BlockStored(medium=M)`` with our hash, our parent, the page's tokens and the source's page size,
and a ``BlockRemoved(medium=M)``. Our log holds a SET of blocks per medium: a store of a block
already held there is counted (``repeated``), not republished.

Placing a store. A tier event names the engine's hash; our hash comes from what the bridge
already knows of that engine hash (the block on the GPU, on another tier, or recently removed
from the GPU or a tier: ``RecentPages`` keeps the last ``recent_pages`` of those, so that a store
flushed right after its GPU block's removal, even in the same batch, is placed). A
self-describing store (tokens, and a parent the bridge knows or none) is hashed our way like a
GPU store. Anything else (vLLM's default CPU placeholder of a block the bridge never saw) is
counted as ``unplaced`` and left out: never guessed. A removal of a block not held on that tier
(its store was unplaced) is counted the same way.

Groups. vLLM sends its tier events per KV-cache group (``group_idx``, the group's kind only in
its self-describing form); the group's role is the one its GPU stores declared. As on the GPU,
a block is held on a tier once every full-attention group holds a copy there (copies are counted:
vLLM's self-describing events may announce a hash once per chunk that covers it).
Sliding-window and other groups' tier events are counted (``other_group``), not modeled: a lower
tier answers no SWA-usable length. An event of a group no GPU store declared is unplaced.

Why a block left (``BlockRemoved.reason``), decided once the engine batch is applied (when the
events are taken): a removal is ``"demoted"`` when the block is then held on a lower tier
(for the GPU: any tier; for a tier: a known tier of a higher rank, ``TIER_RANKS``), else
``"evicted"``. A removal whose blocks differ in reason is split, deepest run first.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Final

from cache.events import (
    MEDIUM_GPU,
    REMOVED_DEMOTED,
    REMOVED_EVICTED,
    BlockRemoved,
    BlockStored,
    Event,
    StateDigest,
    digest_to_block_hash,
    namespace_prior,
)
from swa_es.bridge.errors import MirrorError
from swa_es.bridge.formats import BlockKey, EngineRemoved, EngineStored
from swa_es.bridge.pages import Page, engine_page_digest
from swa_es.bridge.vllm_groups import GroupRole

__all__ = [
    "DEFAULT_RECENT_PAGES",
    "DEVICE_MEDIA",
    "TIER_RANKS",
    "RecentPages",
    "TierBook",
    "TierCounters",
    "TierHost",
    "is_device",
]

logger = logging.getLogger(__name__)

DEVICE_MEDIA: Final = frozenset({None, MEDIUM_GPU})
"""The media that name the device tier (what every GPU code path means)."""
TIER_RANKS: Final[Mapping[str, int]] = {
    "CPU": 1,
    "CPU_PINNED": 1,
    "STORAGE": 2,
    "DISK": 2,
    "EXTERNAL": 3,
}
"""The lower tiers the engines name, by depth below the GPU (vLLM: CPU, STORAGE; sglang:
CPU_PINNED, DISK, EXTERNAL). Another name is an unknown medium: kept, unranked."""
DEFAULT_RECENT_PAGES: Final = 65_536
"""How many engine hashes removed from every tier ``RecentPages`` remembers by default."""


def is_device(medium: str | None) -> bool:
    """Whether ``medium`` names the device (GPU) tier."""
    return medium in DEVICE_MEDIA


def lower_than(below: str, medium: str | None) -> bool:
    """Whether tier ``below`` lies under ``medium``: every tier lies under the GPU; between two
    tiers, only known ranks compare."""
    if is_device(medium):
        return not is_device(below)
    assert medium is not None
    upper, lower = TIER_RANKS.get(medium), TIER_RANKS.get(below)
    return upper is not None and lower is not None and lower > upper


class RecentPages:
    """A bounded memory of engine hashes that left every tier -> their page (oldest forgotten
    first)."""

    def __init__(self, capacity: int = DEFAULT_RECENT_PAGES) -> None:
        if type(capacity) is not int or capacity < 0:
            raise ValueError(f"recent_pages: expected an int >= 0, got {capacity!r}")
        self.capacity = capacity
        self._pages: OrderedDict[BlockKey, Page] = OrderedDict()

    def remember(self, key: BlockKey, page: Page) -> None:
        """``key`` left its last tier holding ``page``."""
        if not self.capacity:
            return
        self._pages[key] = page
        self._pages.move_to_end(key)
        while len(self._pages) > self.capacity:
            self._pages.popitem(last=False)

    def get(self, key: BlockKey) -> Page | None:
        """The page ``key`` held, None when forgotten or never seen."""
        return self._pages.get(key)

    def clear(self) -> None:
        """Forget everything (a new engine run: its hashes may mean other pages)."""
        self._pages.clear()

    def __len__(self) -> int:
        return len(self._pages)


@dataclass(slots=True)
class TierCounters:
    """What the tier book did with the engine's tier events.

    Pages: ``unplaced_tier_blocks`` (stores that could not be placed), ``unplaced_tier_removals``
    (removals of blocks not held on that tier), ``repeated_tier_stores`` (stores of a block
    already held there), ``tier_other_group`` (events of sliding-window and other groups);
    ``unknown_medium_events``: events naming a medium outside ``TIER_RANKS``. ``pages`` counts
    pages by (medium, outcome): ``stored``, ``repeated``, ``unplaced``, ``other_group``,
    ``unplaced_removal`` and, GPU included, ``removed_evicted`` / ``removed_demoted``.
    """

    unplaced_tier_blocks: int = 0
    unplaced_tier_removals: int = 0
    repeated_tier_stores: int = 0
    tier_other_group: int = 0
    unknown_medium_events: int = 0
    pages: Counter[tuple[str, str]] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, int]:
        """The scalar counters by name (``pages`` left out: see ``pages``)."""
        counts = asdict(self)
        del counts["pages"]
        return counts


@dataclass(frozen=True, slots=True)
class TierHost:
    """What the tier book reads from the mirror that owns it.

    ``gpu_page``: the page an engine hash names on the GPU (held or partly held), else None;
    ``page_size_fits``: whether a self-describing store has the source's page size (the first
    store may set it); ``group_role``: the role of a group (None for the groups of an engine
    without groups; None back when the group was never declared); ``full_groups``: the groups
    whose copies hold a block (``(None,)`` for an engine without groups); ``emit``: append one
    of our events; ``digest``: the source's state digest.
    """

    gpu_page: Callable[[BlockKey], Page | None]
    page_size_fits: Callable[[EngineStored], bool]
    group_role: Callable[[int | None], GroupRole | None]
    full_groups: Callable[[], tuple[int | None, ...]]
    emit: Callable[[Event], None]
    digest: StateDigest


def digest_tier_block(digest: StateDigest, our_hash: int, medium: str, held: bool) -> None:
    """Account in ``digest`` for a block entering (``held``) or leaving tier ``medium``
    (``tier_term``, the term a replica adds for it)."""
    if held:
        digest.add_tier(our_hash, medium)
    else:
        digest.remove_tier(our_hash, medium)


class TierBook:
    """Per medium, the engine blocks held there; see the module docstring."""

    def __init__(self, host: TierHost, recent_pages: int = DEFAULT_RECENT_PAGES) -> None:
        self._host = host
        self._copies: dict[str, Counter[tuple[int | None, BlockKey]]] = {}
        self._key_copies: Counter[BlockKey] = Counter()
        self._pages: dict[BlockKey, Page] = {}  # every key some tier copy names
        self._placed: dict[str, dict[BlockKey, Page]] = {}
        self._held: dict[str, Counter[int]] = {}  # medium -> our hash -> placed keys
        self._recent = RecentPages(recent_pages)
        self._unknown_media: set[str] = set()
        self.counters = TierCounters()

    # --- reading ----------------------------------------------------------------------------

    @property
    def media(self) -> tuple[str, ...]:
        """The tiers that hold a block now."""
        return tuple(medium for medium, held in self._held.items() if held)

    def holds(self, medium: str, our_hash: int) -> bool:
        """Whether tier ``medium`` holds our block ``our_hash``."""
        held = self._held.get(medium)
        return held is not None and held[our_hash] > 0

    def page(self, key: BlockKey) -> Page | None:
        """The page an engine hash names on a tier, or recently did on any tier."""
        page = self._pages.get(key)
        return self._recent.get(key) if page is None else page

    def forget(self, key: BlockKey, page: Page) -> None:
        """``key`` left the GPU: remember its page for a tier store that comes after."""
        if key not in self._pages:
            self._recent.remember(key, page)

    def snapshot_events(self) -> list[Event]:
        """One ``BlockStored`` per block held on each tier."""
        events: list[Event] = []
        for medium, placed in self._placed.items():
            seen: set[int] = set()
            for page in placed.values():
                if page.our_hash not in seen:
                    seen.add(page.our_hash)
                    events.append(_stored((page,), medium))
        return events

    # --- engine events ----------------------------------------------------------------------

    def store(self, event: EngineStored) -> None:
        """A store on a lower tier (``event.medium`` is no device medium)."""
        medium = self._medium(event.medium)
        if not self._modeled(medium, event.group_idx, len(event.block_hashes), "unplaced"):
            return
        described = event.block_size > 0 and self._host.page_size_fits(event)
        prior, our_parent = self._chain_start(event) if described else (None, None)
        size = event.block_size
        new: list[Page] = []
        for index, key in enumerate(event.block_hashes):
            page = self._known(key)
            if described:
                tokens = event.token_ids[index * size : (index + 1) * size]
                if page is not None and page.tokens != tokens:
                    raise MirrorError(
                        f"block_hashes[{index}]",
                        f"BlockStored on {medium} gives {key!r} other tokens than it holds",
                    )
                if page is None and prior is not None:
                    extra = None if event.extra_keys is None else event.extra_keys[index]
                    digest = engine_page_digest(prior, tokens, extra)
                    page = Page(digest_to_block_hash(digest), our_parent, tokens, digest)
            if page is None:
                self._count(medium, "unplaced", 1)
                prior = None
                continue
            prior, our_parent = page.digest, page.our_hash
            placed = self._add_copy(medium, event.group_idx, key, page)
            if placed is not None:
                new.append(placed)
        self._emit_stores(medium, new)

    def remove(self, event: EngineRemoved) -> None:
        """A removal from a lower tier (``event.medium`` is no device medium)."""
        medium = self._medium(event.medium)
        if not self._modeled(medium, event.group_idx, len(event.block_hashes), "unplaced_removal"):
            return
        copies = self._copies.setdefault(medium, Counter())
        gone: list[int] = []
        for key in event.block_hashes:
            slot = (event.group_idx, key)
            if not copies[slot]:
                self._count(medium, "unplaced_removal", 1)
                continue
            copies[slot] -= 1
            if not copies[slot]:
                del copies[slot]
            removed = self._settle(medium, key)[1]
            self._key_copies[key] -= 1
            if not self._key_copies[key]:
                del self._key_copies[key]
                self._recent.remember(key, self._pages.pop(key))
            if removed is not None:
                gone.append(removed.our_hash)
        if gone:
            self._host.emit(BlockRemoved(block_hashes=tuple(gone), medium=medium))

    def regroup(self) -> None:
        """The engine declared a group: which blocks each tier holds is read again."""
        for medium in list(self._copies):
            keys = dict.fromkeys(
                [*(key for _, key in self._copies[medium]), *self._placed.get(medium, {})]
            )
            new: list[Page] = []
            gone: list[int] = []
            for key in keys:
                stored, removed = self._settle(medium, key)
                if stored is not None:
                    new.append(stored)
                if removed is not None:
                    gone.append(removed.our_hash)
            if gone:
                self._host.emit(BlockRemoved(block_hashes=tuple(gone), medium=medium))
            self._emit_stores(medium, new)

    def clear(self) -> None:
        """Every tier emptied (``AllBlocksCleared``; no event of its own). The pages stay
        known: the engine's hashes keep their meaning within its run."""
        for key, page in self._pages.items():
            self._recent.remember(key, page)
        self._copies.clear()
        self._key_copies.clear()
        self._pages.clear()
        self._placed.clear()
        self._held.clear()

    def reset(self) -> None:
        """A new engine run: every tier emptied and every page forgotten."""
        self.clear()
        self._recent.clear()

    def with_reasons(self, events: Iterable[Event]) -> list[Event]:
        """``events`` with a reason on every ``BlockRemoved`` that has none (see the module
        docstring), split where its blocks differ; called once the engine batch is applied."""
        out: list[Event] = []
        for event in events:
            if isinstance(event, BlockRemoved) and event.reason is None:
                out.extend(self._reasoned(event))
            else:
                out.append(event)
        return out

    # --- inside -----------------------------------------------------------------------------

    def _medium(self, medium: str | None) -> str:
        assert medium is not None and not is_device(medium)
        if medium not in TIER_RANKS:
            self.counters.unknown_medium_events += 1
            if medium not in self._unknown_media:
                self._unknown_media.add(medium)
                logger.warning("bridge: the engine names an unknown medium %r: kept as is", medium)
        return medium

    def _modeled(self, medium: str, group: int | None, count: int, unknown: str) -> bool:
        """Whether the event's group holds blocks. Else its pages are counted: as ``unknown``
        (``unplaced`` or ``unplaced_removal``) for a group never declared, as ``other_group``
        for a group of another role."""
        role = self._host.group_role(group)
        if role is GroupRole.FULL:
            return True
        self._count(medium, unknown if role is None else "other_group", count)
        return False

    def _count(self, medium: str, outcome: str, pages: int) -> None:
        """``pages`` more of ``outcome`` on ``medium``, in ``pages`` and in its total."""
        self.counters.pages[(medium, outcome)] += pages
        counters = self.counters
        if outcome == "unplaced":
            counters.unplaced_tier_blocks += pages
        elif outcome == "unplaced_removal":
            counters.unplaced_tier_removals += pages
        elif outcome == "other_group":
            counters.tier_other_group += pages
        elif outcome == "repeated":
            counters.repeated_tier_stores += pages

    def _known(self, key: BlockKey) -> Page | None:
        page = self._host.gpu_page(key)
        return self.page(key) if page is None else page

    def _chain_start(self, event: EngineStored) -> tuple[bytes | None, int | None]:
        """(prior digest, our parent hash) of a self-describing store's first page; a prior of
        None when its parent is unknown."""
        parent_key = event.parent_block_hash
        if parent_key is None:
            return namespace_prior(event.namespace), None
        parent = self._known(parent_key)
        return (None, None) if parent is None else (parent.digest, parent.our_hash)

    def _add_copy(self, medium: str, group: int | None, key: BlockKey, page: Page) -> Page | None:
        """One more copy of ``key`` on ``medium`` in ``group``; the page when our block is now
        newly held there."""
        copies = self._copies.setdefault(medium, Counter())
        slot = (group, key)
        if copies[slot]:
            self._count(medium, "repeated", 1)
        copies[slot] += 1
        self._key_copies[key] += 1
        self._pages.setdefault(key, page)
        return self._settle(medium, key)[0]

    def _settle(self, medium: str, key: BlockKey) -> tuple[Page | None, Page | None]:
        """Place or unplace ``key`` on ``medium`` by its copies: (the page newly held, the page
        no longer held), each only when our block's presence on the tier changed."""
        copies = self._copies.get(medium, Counter())
        groups = self._host.full_groups()
        want = bool(groups) and all(copies[(group, key)] > 0 for group in groups)
        placed = self._placed.setdefault(medium, {})
        held = self._held.setdefault(medium, Counter())
        if want and key not in placed:
            page = placed[key] = self._pages[key]
            held[page.our_hash] += 1
            if held[page.our_hash] == 1:
                digest_tier_block(self._host.digest, page.our_hash, medium, True)
                self.counters.pages[(medium, "stored")] += 1
                return page, None
        elif not want and key in placed:
            page = placed.pop(key)
            held[page.our_hash] -= 1
            if not held[page.our_hash]:
                del held[page.our_hash]
                digest_tier_block(self._host.digest, page.our_hash, medium, False)
                return None, page
        return None, None

    def _emit_stores(self, medium: str, pages: list[Page]) -> None:
        """One ``BlockStored`` per run of pages each the child of the one before."""
        run: list[Page] = []
        for page in pages:
            if run and page.our_parent != run[-1].our_hash:
                self._host.emit(_stored(run, medium))
                run = []
            run.append(page)
        if run:
            self._host.emit(_stored(run, medium))

    def _reasoned(self, event: BlockRemoved) -> list[Event]:
        medium = event.medium
        runs: list[tuple[str, list[int]]] = []
        for our_hash in event.block_hashes:
            demoted = any(
                lower_than(below, medium) and held[our_hash] > 0
                for below, held in self._held.items()
            )
            reason = REMOVED_DEMOTED if demoted else REMOVED_EVICTED
            self.counters.pages[(medium or MEDIUM_GPU, f"removed_{reason}")] += 1
            if runs and runs[-1][0] == reason:
                runs[-1][1].append(our_hash)
            else:
                runs.append((reason, [our_hash]))
        return [
            BlockRemoved(block_hashes=tuple(hashes), medium=medium, reason=reason)
            for reason, hashes in reversed(runs)
        ]


def _stored(pages: Iterable[Page], medium: str) -> BlockStored:
    run = tuple(pages)
    return BlockStored(
        block_hashes=tuple(page.our_hash for page in run),
        parent_block_hash=run[0].our_parent,
        token_ids=tuple(token for page in run for token in page.tokens),
        block_size=len(run[0].tokens),
        medium=medium,
    )
