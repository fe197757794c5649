"""sglang 0.5.23: its ``UnifiedRadixCache`` with FULL and SWA components records SWA tombstone
and restore events, under either of its tree cores (the bundled Rust core, sglang's default,
or the Python ``UnifiedTreeCore``).

Imported only by ``swa_es.integrations.sglang.install()`` inside sglang's environment. Under the
Rust core Python sees no tree nodes, only what crosses the core's Python interface; the
integration reads SWA residency there (each point checked against the 0.5.23 source):

- **Restores and fresh windows.** Every SWA value a node gains goes through the core's
  ``set_component_device_value(node_id, SWA, value)``, called by sglang's SWA component for its
  ``SWARebuild`` and ``RecoverSWAWithLockedFull`` actions (a new leaf's window, a tombstone
  refilled on insert, a load-back). The hook reads that node's page hashes
  (``get_hash_values``) and FULL ids (``get_component_device_value``): a tombstoned block among
  them is restored, and the FULL ids are remembered as that block's slots.
- **Born tombstoned.** A block an ``insert`` stores that gained no SWA value in that insert lies
  below the request's SWA-evicted length: it is tombstoned from birth. HiCache's ``load_back``
  (stores on the GPU, then windows what it loaded) is read the same way (from the source; the
  tests run no host tier).
- **Tombstones.** An eviction step or an early SWA lock release (``dec_swa_lock_only``) hands the
  cache the ids it freed (``_apply_eviction_result``): SWA frees come as FULL ids. Ids freed for
  SWA but not for FULL are SWA-only frees, i.e. tombstones; their blocks are found through the
  remembered slots.

Order on the stream: before it appends an event the integration drains the core's native event
queue into its own (``take_events`` returns both, in order), so each event follows the stores and
removals that preceded it, and it sends residency only for blocks the stream holds on the GPU.
A cache whose SWA state does not gate prefix matching (``swa_gates_prefix_match`` off: a
per-request SWA ring) has no residency to report and is left unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

import numpy
import torch
from sglang.srt.disaggregation.kv_events import KVCacheEvent, StorageMedium
from sglang.srt.mem_cache import unified_radix_cache
from sglang.srt.mem_cache.rust_tree_core.adapter import RustUnifiedTreeCore
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeCore

from swa_es.integrations.sglang.extension import event_classes

logger = logging.getLogger(__name__)

SGLANG_VERSION: Final = "0.5.23"
_TRACKER: Final = "_swa_es_residency"
_GPU: Final = StorageMedium.GPU.value
_UNKNOWN_SLOT: Final = -(2**63)


BlockSWAEvicted, BlockSWARestored = event_classes(KVCacheEvent, __name__)


def _int64_hashes(hex_digests: list[str]) -> torch.Tensor:
    """sglang's event hashes of its page digests (``hash_str_to_int64``: the first 64 bits,
    signed), converted in one pass."""
    if not hex_digests:
        return torch.empty(0, dtype=torch.int64)
    raw = bytes.fromhex("".join(digest[:16] for digest in hex_digests))
    return torch.from_numpy(numpy.frombuffer(raw, dtype=">i8").astype(numpy.int64))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.shape == b.shape and bool(torch.equal(a, b)))


def _on_gpu(event: Any) -> bool:
    medium = getattr(event, "medium", None)
    return medium is None or getattr(medium, "value", medium) == _GPU


class Residency:
    """One cache's SWA residency as its stream reports it, and the events still to be taken."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.core = cache.tree_core
        self.page = int(cache.page_size)
        self.pending: list[Any] = []
        self.live: set[int] = set()
        self.tombstoned: set[int] = set()
        self.slot_hash: torch.Tensor | None = None
        self.storing = 0  # how deep in calls that store blocks (insert, load_back) we are
        self.windowed: list[int] = []  # blocks given an SWA value by the running call
        self.stored: list[int] = []  # blocks the running call stored on the GPU
        self.unmatched_reported = False

    @property
    def window(self) -> int:
        """The window sglang's ``match_prefix`` applies (its SWA retention span), in tokens."""
        return int(self.cache.sliding_window_size)

    # --- the stream ------------------------------------------------------------------------

    def drain(self) -> None:
        """Move the core's native events to ``pending``, following their GPU stores/removals."""
        events = self.core.take_events()
        for event in events:
            name = type(event).__name__
            if name == "AllBlocksCleared":
                self.live.clear()
                self.tombstoned.clear()
            elif name == "BlockStored" and _on_gpu(event):
                self.live.update(event.block_hashes)
                if self.storing:
                    self.stored.extend(event.block_hashes)
            elif name == "BlockRemoved" and _on_gpu(event):
                self.live.difference_update(event.block_hashes)
                self.tombstoned.difference_update(event.block_hashes)
        self.pending.extend(events)

    def take(self) -> list[Any]:
        """Every event recorded since the last take, native and ours, in order."""
        self.drain()
        events, self.pending = self.pending, []
        return events

    def _emit(self, hashes: Iterable[int], resident: bool) -> None:
        """Queue the event for those of ``hashes`` whose residency it changes (drained first)."""
        if resident:
            changed = [h for h in dict.fromkeys(hashes) if h in self.tombstoned]
            self.tombstoned.difference_update(changed)
        else:
            held = self.live
            changed = [h for h in dict.fromkeys(hashes) if h in held and h not in self.tombstoned]
            self.tombstoned.update(changed)
        if changed:
            event_type = BlockSWARestored if resident else BlockSWAEvicted
            self.pending.append(
                event_type(block_hashes=changed, medium=_GPU, sliding_window_size=self.window)
            )

    def declare(self) -> None:
        """After a reset: the stream reports residency, under this window."""
        self.drain()
        self.live.clear()
        self.tombstoned.clear()
        self.slot_hash = None
        self.pending.append(
            BlockSWARestored(block_hashes=[], medium=_GPU, sliding_window_size=self.window)
        )

    # --- what the cache did ----------------------------------------------------------------

    def window_set(self, node_id: int) -> None:
        """The node gained an SWA value: remember its slots; restore its blocks."""
        digests = _int64_hashes(self.core.get_hash_values(node_id))
        full = self.core.get_component_device_value(node_id, ComponentType.FULL)
        if full is not None and len(digests) and len(full) == len(digests) * self.page:
            self._remember(full, digests)
        hashes = digests.tolist()
        if self.storing:
            self.windowed.extend(hashes)
        else:
            self.drain()
            self._emit(hashes, resident=True)

    def begin_storing(self) -> None:
        """A call that stores blocks starts (``insert``; HiCache's ``load_back``): what it
        stores and windows is collected until the outermost such call ends."""
        if not self.storing:
            self.drain()
        self.storing += 1

    def end_storing(self) -> None:
        """The outermost storing call ended: blocks stored without a window are tombstoned,
        windowed ones that were tombstoned are restored."""
        if self.storing > 1:
            self.storing -= 1
            return
        self.drain()
        self.storing = 0
        ordered, stored = self.windowed, self.stored
        windowed = set(ordered)
        self.windowed, self.stored = [], []
        if windowed - self.live:  # the tree's hashes are not the stream's: say nothing
            if not self.unmatched_reported:
                self.unmatched_reported = True
                logger.error(
                    "swa-es: sglang's events carry other hashes than its tree (namespaced "
                    "hashes, e.g. LoRA adapters): SWA residency of those blocks is not sent"
                )
            return
        self._emit((h for h in stored if h not in windowed), resident=False)
        self._emit(ordered, resident=True)

    def swa_freed(self, result: Any) -> None:
        """An eviction step's frees: ids freed for SWA and not for FULL are tombstones."""
        freed = result.device_frees.get(ComponentType.SWA)
        if not freed or self.slot_hash is None:
            return
        removed = result.device_frees.get(ComponentType.FULL)
        if removed and len(removed) == len(freed) and all(map(_same, freed, removed)):
            return  # whole nodes removed (their BlockRemoved is sglang's own)
        ids = torch.cat(list(freed))
        if removed:
            ids = ids[~torch.isin(ids, torch.cat(list(removed)))]
        ids = ids[ids < len(self.slot_hash)]
        if len(ids) == 0:
            return
        hashes = torch.unique_consecutive(self.slot_hash[ids]).tolist()
        self.drain()
        self._emit((h for h in hashes if h != _UNKNOWN_SLOT), resident=False)

    def _remember(self, full: torch.Tensor, hashes: torch.Tensor) -> None:
        table = self.slot_hash
        mapping = getattr(self.cache.token_to_kv_pool_allocator, "full_to_swa_index_mapping", None)
        needed = len(mapping) if mapping is not None else int(full.max().item()) + 1
        if table is None or len(table) < needed or table.device != full.device:
            grown = torch.full((needed,), _UNKNOWN_SLOT, dtype=torch.int64, device=full.device)
            if table is not None and table.device == full.device:
                grown[: len(table)] = table
            table = self.slot_hash = grown
        values = hashes.to(full.device).repeat_interleave(self.page)
        table[full.to(torch.int64)] = values


def residency(cache: Any) -> Residency | None:
    """The cache's residency tracker; None where the integration leaves the cache unchanged."""
    tracker: Residency | None = cache.__dict__.get(_TRACKER)
    return tracker


def _tracks(cache: Any) -> bool:
    swa = getattr(cache, "components", {}).get(ComponentType.SWA)
    return (
        swa is not None
        and bool(getattr(swa, "gates_prefix_match", False))
        and bool(cache.tree_core.kv_events.enabled)
        and not cache.disable
    )


def install() -> None:
    """Patch sglang 0.5.23's ``UnifiedRadixCache`` and both tree cores (module docstring)."""
    cache_class = unified_radix_cache.UnifiedRadixCache
    original_reset = cache_class.reset
    original_take = cache_class.take_events
    original_insert = cache_class.insert
    original_load_back = cache_class.load_back
    original_apply = cache_class._apply_eviction_result

    def reset(self: Any) -> None:
        tracker = residency(self)
        if tracker is not None:
            tracker.drain()  # events recorded before the reset keep their place
        original_reset(self)
        if tracker is None and _tracks(self):
            tracker = self.__dict__[_TRACKER] = Residency(self)
            self.tree_core.__dict__[_TRACKER] = tracker
        if tracker is not None:
            tracker.declare()

    def take_events(self: Any) -> Any:
        tracker = residency(self)
        return original_take(self) if tracker is None else tracker.take()

    def insert(self: Any, params: Any) -> Any:
        tracker = residency(self)
        if tracker is None:
            return original_insert(self, params)
        tracker.begin_storing()
        try:
            return original_insert(self, params)
        finally:
            tracker.end_storing()

    def load_back(self: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = residency(self)
        if tracker is None:
            return original_load_back(self, *args, **kwargs)
        tracker.begin_storing()
        try:
            return original_load_back(self, *args, **kwargs)
        finally:
            tracker.end_storing()

    def apply_eviction_result(self: Any, result: Any) -> None:
        tracker = residency(self)
        if tracker is not None:
            tracker.swa_freed(result)
        original_apply(self, result)

    for name, hook, original in (
        ("reset", reset, original_reset),
        ("take_events", take_events, original_take),
        ("insert", insert, original_insert),
        ("load_back", load_back, original_load_back),
        ("_apply_eviction_result", apply_eviction_result, original_apply),
    ):
        hook.__doc__ = original.__doc__
        setattr(cache_class, name, hook)
    for core_class in (RustUnifiedTreeCore, UnifiedTreeCore):
        _hook_window_set(core_class)


def _hook_window_set(core_class: type[Any]) -> None:
    original = core_class.set_component_device_value

    def set_component_device_value(
        self: Any, node_id: int, component_type: Any, value: torch.Tensor
    ) -> None:
        original(self, node_id, component_type, value)
        if component_type == ComponentType.SWA:
            tracker: Residency | None = self.__dict__.get(_TRACKER)
            if tracker is not None:
                tracker.window_set(node_id)

    set_component_device_value.__doc__ = original.__doc__
    core_class.set_component_device_value = set_component_device_value
