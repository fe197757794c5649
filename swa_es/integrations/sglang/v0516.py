"""sglang 0.5.16: its ``SWARadixCache`` records SWA tombstone and restore events.

Imported only by ``swa_es.integrations.sglang.install()`` inside sglang's environment. What it
changes in sglang (each change checked against the 0.5.16 source):

- ``TreeNode.swa_tombstone`` gets a class-level data descriptor with only ``__set__``: reads still
  come straight from the node's ``__dict__`` (no cost on sglang's hot paths); a write that flips
  the flag of a node that already has its page hashes (a node the stream has stored) records
  ``BlockSWAEvicted`` or ``BlockSWARestored`` for that node's pages into its cache's own
  ``kv_event_queue``. This covers every place 0.5.16 tombstones (SWA eviction of an internal node
  or of a full-locked leaf, ``dec_swa_lock_only``) or revives (the insert branches, locked or not).
  Flags written while a node is being built or split (no hashes yet) change no block's state and
  record nothing.
- ``SWARadixCache._add_new_node``: a node born tombstoned (an insert below a request's
  ``swa_evicted_seqlen``) records ``BlockSWAEvicted`` right after its ``BlockStored``.
- ``SWARadixCache.reset``: marks the new root with its cache, so a flag write finds the queue,
  and declares the window (``BlockSWARestored`` with no hashes) after its ``AllBlocksCleared``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from sglang.srt.disaggregation.kv_events import KVCacheEvent, StorageMedium
from sglang.srt.mem_cache import swa_radix_cache
from sglang.srt.mem_cache.utils import hash_str_to_int64

from swa_es.integrations.sglang.extension import event_classes

logger = logging.getLogger(__name__)

SGLANG_VERSION: Final = "0.5.16"
_OWNER: Final = "_swa_es_cache"
_FLAG: Final = "swa_tombstone"
_GPU: Final = StorageMedium.GPU.value


BlockSWAEvicted, BlockSWARestored = event_classes(KVCacheEvent, __name__)


def record_residency(cache: Any, node: Any, resident: bool) -> None:
    """Queue the event for ``node``'s pages on ``cache`` (nothing when its events are off)."""
    if not cache.enable_kv_cache_events:
        return
    hashes = [hash_str_to_int64(page_hash) for page_hash in node.hash_value]
    if hashes:
        _queue(cache, hashes, resident)


def declare_window(cache: Any) -> None:
    """Queue the declaration: a ``BlockSWARestored`` with no hashes, carrying the window."""
    if cache.enable_kv_cache_events:
        _queue(cache, [], resident=True)


def _queue(cache: Any, hashes: list[int], resident: bool) -> None:
    event_type = BlockSWARestored if resident else BlockSWAEvicted
    cache.kv_event_queue.append(
        event_type(
            block_hashes=hashes,
            medium=_GPU,
            sliding_window_size=int(cache.sliding_window_size),
        )
    )


def _owner(node: Any) -> Any:
    while node.parent is not None:
        node = node.parent
    return node.__dict__.get(_OWNER)


class _TombstoneFlag:
    """``TreeNode.swa_tombstone``: a write that flips a stored node's flag records an event.

    No ``__get__``: Python then reads the attribute from the instance ``__dict__``.
    """

    _orphans_reported = False

    def __set__(self, node: Any, value: bool) -> None:
        state = node.__dict__
        before = state.get(_FLAG)
        state[_FLAG] = value
        if before is None or bool(before) == bool(value) or state.get("hash_value") is None:
            return
        cache = _owner(node)
        if cache is None:
            if not _TombstoneFlag._orphans_reported:
                _TombstoneFlag._orphans_reported = True
                logger.error(
                    "swa-es: an SWARadixCache built before install() changed SWA residency; "
                    "its stream carries no SWA events (install before building the cache)"
                )
            return
        record_residency(cache, node, resident=not value)


def install() -> None:
    """Patch sglang 0.5.16's ``SWARadixCache`` (see the module docstring); call once."""
    cache_class = swa_radix_cache.SWARadixCache
    original_reset = cache_class.reset
    original_add = cache_class._add_new_node

    def reset(self: Any) -> None:
        original_reset(self)
        self.root_node.__dict__[_OWNER] = self
        declare_window(self)

    def add_new_node(self: Any, *args: Any, **kwargs: Any) -> Any:
        node = original_add(self, *args, **kwargs)
        if node.swa_tombstone:
            record_residency(self, node, resident=False)
        return node

    reset.__doc__ = original_reset.__doc__
    add_new_node.__doc__ = original_add.__doc__
    cache_class.reset = reset
    cache_class._add_new_node = add_new_node
    swa_radix_cache.TreeNode.swa_tombstone = _TombstoneFlag()
