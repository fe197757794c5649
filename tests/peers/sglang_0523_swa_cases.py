"""Scenarios on sglang 0.5.23's own ``UnifiedRadixCache`` (FULL + SWA) with
``swa_es.integrations.sglang`` installed, one per way sglang tombstones or restores a node, run
under each of its tree cores (the bundled Rust one, its default, and the Python one); prints one
JSON object (core -> scenario -> the events its cache queued, as plain lists). Run in
``bench/.venv-sglang-0523`` by ``tests/bridge/test_sglang_0523_swa_integration.py``.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from swa_es.integrations.sglang import install, installed

install()

import msgspec  # noqa: E402
import torch  # noqa: E402
from sglang.srt.disaggregation.kv_events import KVEventBatch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.events import KvEventLoraNames  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402

from swa_es.integrations.sglang.publishing import split_runs  # noqa: E402
from tests.peers.sglang_0523_swa_engine import build_cache  # noqa: E402

A = [1, 2, 3, 4, 5, 6, 7, 8]
B = [1, 2, 3, 4, 9, 10, 11, 12]
CORE = "rust"


def plain(event: Any) -> list[Any]:
    """An event as ``[type, block_hashes?, window?]``."""
    fields: list[Any] = [type(event).__name__]
    if hasattr(event, "block_hashes"):
        fields.append(list(event.block_hashes))
    if hasattr(event, "sliding_window_size"):
        fields.append(event.sliding_window_size)
    return fields


class Case:
    """A small cache (page 1) under the current core, and the events it queued."""

    def __init__(self, window: int = 4, events: bool = True) -> None:
        self.cache, self.allocator = build_cache(1, window, 64, 64, CORE, events=events)

    def take(self) -> list[list[Any]]:
        return [plain(e) for e in self.cache.take_events()]

    def insert(self, tokens: list[int], evicted: int = 0) -> None:
        value = self.allocator.alloc(len(tokens))
        params = InsertParams(key=RadixKey(array("q", tokens)), value=value)
        if evicted:
            self.allocator.free_swa(value[:evicted])
            params.set_evicted_seqlen(ComponentType.SWA, evicted)
        self.cache.insert(params)

    def match(self, tokens: list[int]) -> tuple[int, Any]:
        result = self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))
        return result.device_prefix_len, result.last_device_node

    def tombstone_shared(self) -> None:
        """A and B stored; SWA eviction with B's leaf locked tombstones their shared 1-4 (and
        evicts A's leaf 5-8 whole)."""
        self.insert(A)
        self.insert(B)
        lock = self.cache.lock(self.match(B)[1])
        self.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=12))
        self.cache.unlock(lock)


def start() -> dict[str, Any]:
    case = Case(window=16)
    return {"events": case.take(), "core": type(case.cache.tree_core).__name__}


def internal_tombstone_then_restore() -> dict[str, Any]:
    case = Case()
    case.insert(A)
    case.insert(B)
    stored = case.take()
    lock = case.cache.lock(case.match(B)[1])
    case.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=12))
    case.cache.unlock(lock)
    tombstoned = case.take()
    usable_after = case.match(B)[0]
    case.insert(A)  # an incoming request's own slots restore 1-4
    restored = case.take()
    return {
        "stored": stored,
        "tombstoned": tombstoned,
        "usable_after": usable_after,
        "restored": restored,
        "usable_restored": case.match(A)[0],
    }


def early_release_of_a_leaf() -> dict[str, Any]:
    case = Case()
    case.insert(A)
    stored = case.take()
    lock = case.cache.lock(case.match(A)[1])
    case.cache.release_swa(lock)  # the running request's window moved past its prefix
    case.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=8))  # full KV still locked
    released = case.take()
    usable = case.match(A)[0]
    case.cache.unlock(lock)
    case.cache.evict(EvictParams(num_tokens=8))
    return {"stored": stored, "released": released, "usable": usable, "evicted": case.take()}


def born_tombstoned() -> dict[str, Any]:
    case = Case()
    case.insert(A, evicted=4)  # a long decode freed the SWA of its first 4 tokens
    return {"events": case.take(), "usable": case.match(A)[0]}


def locked_full_restore() -> dict[str, Any]:
    case = Case()
    case.tombstone_shared()
    case.take()
    lock = case.cache.lock(case.match(B)[1])  # full-locks 1-4 (a running request on B)
    case.insert(A)
    restored = case.take()
    case.cache.unlock(lock)
    return {"restored": restored, "usable": case.match(A)[0]}


def reset() -> dict[str, Any]:
    case = Case()
    case.tombstone_shared()
    case.take()
    case.cache.reset()
    return {"events": case.take()}


def events_off() -> dict[str, Any]:
    case = Case(events=False)
    case.tombstone_shared()
    case.insert(A)
    return {"events": case.take()}


def lora_namespace() -> dict[str, Any]:
    """A request under a LoRA adapter its events name: sglang namespaces the event hashes, so
    the tree's own page hashes are not the stream's; the integration sends no residency for
    those blocks rather than guess."""
    names = KvEventLoraNames()
    names.register(SimpleNamespace(extra_key="adapter-key", lora_id="a1"), "adapter")
    cache, allocator = build_cache(1, 4, 64, 64, CORE, lora_names=names)
    cache.take_events()
    value = allocator.alloc(len(A))
    allocator.free_swa(value[:4])
    params = InsertParams(key=RadixKey(array("q", A), extra_key="adapter-key"), value=value)
    params.set_evicted_seqlen(ComponentType.SWA, 4)
    cache.insert(params)
    return {"events": [plain(e) for e in cache.take_events()]}


def typed_decoder() -> dict[str, Any]:
    """sglang's own typed decoder on the batches the publisher splits a mixed step into."""
    case = Case()
    case.insert(A, evicted=4)
    case.insert(B)
    events = case.cache.take_events()
    decoder = msgspec.msgpack.Decoder(KVEventBatch)
    runs = []
    for run in split_runs(events):
        payload = msgspec.msgpack.encode(KVEventBatch(ts=1.0, events=run))
        try:
            decoded = [plain(e) for e in decoder.decode(payload).events]
            runs.append({"decoded": decoded, "sent": [plain(e) for e in run]})
        except msgspec.ValidationError as exc:
            runs.append({"rejected": str(exc), "sent": [plain(e) for e in run]})
    return {"runs": runs}


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "start": start,
    "internal_tombstone_then_restore": internal_tombstone_then_restore,
    "early_release_of_a_leaf": early_release_of_a_leaf,
    "born_tombstoned": born_tombstoned,
    "locked_full_restore": locked_full_restore,
    "reset": reset,
    "events_off": events_off,
    "lora_namespace": lora_namespace,
    "typed_decoder": typed_decoder,
}


def main() -> int:
    global CORE
    out: dict[str, Any] = {"installed": installed()}
    for core in ("rust", "python"):
        CORE = core
        results = {}
        for name, scenario in SCENARIOS.items():
            torch.manual_seed(0)
            results[name] = scenario()
        out[core] = results
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
