"""Scenarios on sglang 0.5.16's own ``SWARadixCache`` with ``swa_es.integrations.sglang``
installed, one per way sglang tombstones or revives a node; prints one JSON object (scenario ->
the events its cache queued, as plain lists). Run in ``bench/.venv-sglang`` by
``tests/bridge/test_sglang_swa_integration.py``.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable
from typing import Any

from swa_es.integrations.sglang import install, installed

install()

import msgspec  # noqa: E402
import torch  # noqa: E402
from sglang.srt.disaggregation.kv_events import KVEventBatch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    DecLockRefParams,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from bench.sglang_adapter import RunConfig, build_cache  # noqa: E402
from swa_es.integrations.sglang.publishing import split_runs  # noqa: E402

A = [1, 2, 3, 4, 5, 6, 7, 8]
B = [1, 2, 3, 4, 9, 10, 11, 12]


def plain(event: Any) -> list[Any]:
    """An event as ``[type, block_hashes?, window?]``."""
    name = type(event).__name__
    fields = [name]
    if hasattr(event, "block_hashes"):
        fields.append(list(event.block_hashes))
    if hasattr(event, "sliding_window_size"):
        fields.append(event.sliding_window_size)
    return fields


class Case:
    """A small cache (page 1) and the events it queued."""

    def __init__(self, window: int = 4, events: bool = True) -> None:
        config = RunConfig(
            page_size=1, events=events, requests=0, full_size=64, swa_size=64, window=window
        )
        self.cache, self.allocator = build_cache(config)
        self.log: list[list[Any]] = []

    def take(self) -> list[list[Any]]:
        events = [plain(e) for e in self.cache.take_events()]
        self.log.extend(events)
        return events

    def insert(self, tokens: list[int], evicted: int = 0) -> None:
        value = self.allocator.alloc(len(tokens))
        if evicted:
            self.allocator.free_swa(value[:evicted])
        params = InsertParams(
            key=RadixKey(array("q", tokens)), value=value, swa_evicted_seqlen=evicted
        )
        self.cache.insert(params)

    def match(self, tokens: list[int]) -> tuple[int, Any]:
        result = self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))
        return len(result.device_indices), result.last_device_node


def start() -> dict[str, Any]:
    case = Case(window=16)
    return {"events": case.take()}


def internal_tombstone_then_restore() -> dict[str, Any]:
    case = Case()
    case.insert(A)
    case.insert(B)
    stored = case.take()
    case.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=4))  # the shared [1..4] first
    tombstoned = case.take()
    usable_after = case.match(A)[0]
    case.insert(A)  # an incoming request's own slots revive it
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
    _, node = case.match(A)
    lock = case.cache.inc_lock_ref(node)
    case.cache.dec_swa_lock_only(node, lock.swa_uuid_for_lock)
    released = case.take()
    case.cache.dec_lock_ref(node, DecLockRefParams(swa_uuid_for_lock=lock.swa_uuid_for_lock), True)
    case.cache.evict(EvictParams(num_tokens=8))
    return {"stored": stored, "released": released, "evicted": case.take()}


def born_tombstoned() -> dict[str, Any]:
    case = Case()
    case.insert(A, evicted=4)  # a long decode freed the SWA of its first 4 tokens
    return {"events": case.take(), "usable": case.match(A)[0]}


def locked_full_restore() -> dict[str, Any]:
    case = Case()
    case.insert(A)
    case.insert(B)
    case.take()
    case.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=4))
    case.take()
    _, deep = case.match(A)  # [5..8]: a whole window after the tombstoned [1..4]
    lock = case.cache.inc_lock_ref(deep)  # full-locks [1..4]; SWA-locks only [5..8]
    case.insert(A)
    restored = case.take()
    case.cache.dec_lock_ref(deep, DecLockRefParams(swa_uuid_for_lock=lock.swa_uuid_for_lock))
    return {"restored": restored, "usable": case.match(A)[0]}


def events_off() -> dict[str, Any]:
    case = Case(events=False)
    case.insert(A)
    case.insert(B)
    case.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=4))
    case.insert(A)
    return {"events": case.take(), "queue": len(case.cache.kv_event_queue)}


def typed_decoder() -> dict[str, Any]:
    """sglang's own typed decoder on the batches the publisher splits a mixed step into."""
    case = Case()
    case.insert(A)
    case.insert(B)
    case.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=12))
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
    "events_off": events_off,
    "typed_decoder": typed_decoder,
}


def main() -> int:
    out: dict[str, Any] = {"installed": installed()}
    for name, scenario in SCENARIOS.items():
        torch.manual_seed(0)
        out[name] = scenario()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
