"""vLLM 0.33.0's own KV-event batches with offload-tier events (run in bench/.venv-vllm).

Reads one JSON object on stdin, ``{"scenarios": {NAME: [batch, ...]}}``, a batch being a list of
steps, and prints ``{"frames": {NAME: [payload_hex, ...]}}``: each batch as vLLM's
``KVEventBatch``, encoded by the msgspec encoder its ``ZmqEventPublisher`` uses. Steps:

- ``{"gpu_store": [hashes], "parent": h | null, "tokens": [...], "block_size": n, "group": g,
  "kind": k}``: a ``BlockStored`` as vLLM's block pool records it (medium ``GPU``);
- ``{"gpu_remove": [hashes], "group": g}``: its ``BlockRemoved``;
- ``{"offload": [[hash, group], ...], "medium": "CPU" | "STORAGE", "removed": bool}``: an
  ``OffloadingEvent`` of vLLM's offloading manager translated by vLLM's own
  ``OffloadingEventsTracker`` in its default form (placeholder stores: one hash, no tokens, no
  parent, block size 0);
- ``{"described": [hashes], "parent": h | null, "tokens": [...], "block_size": n, "group": g,
  "medium": m}``: a store in the tracker's self-describing form (every block hash of the chunk,
  its parent, its tokens, the GPU block size, the group's kind);
- ``{"clear": true}``: ``AllBlocksCleared``.

Hashes are small ints here; vLLM's ``BlockHash`` is their 32-byte big-endian form, and events
carry it as vLLM converts it (``maybe_convert_block_hash``: the int back).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.events import (
    OffloadingEventsTracker,
)
from vllm.v1.core.kv_cache_utils import BlockHash, maybe_convert_block_hash
from vllm.v1.kv_offload.base import (
    Medium,
    OffloadingEvent,
    OffloadingKVEventsConfig,
    make_offload_key,
)


def block_hash(value: int) -> BlockHash:
    """vLLM's 32-byte block hash for a small int."""
    return BlockHash(value.to_bytes(32, "big"))


def wire(value: int | None) -> Any:
    """A hash as vLLM's events carry it."""
    return None if value is None else maybe_convert_block_hash(block_hash(value))


def events_of(step: dict[str, Any], tracker: OffloadingEventsTracker) -> list[Any]:
    """vLLM's events for one step."""
    if "gpu_store" in step:
        return [
            BlockStored(
                block_hashes=[wire(h) for h in step["gpu_store"]],
                parent_block_hash=wire(step["parent"]),
                token_ids=step["tokens"],
                block_size=step["block_size"],
                lora_id=None,
                medium="GPU",
                lora_name=None,
                extra_keys=[None] * len(step["gpu_store"]),
                group_idx=step["group"],
                kv_cache_spec_kind=step["kind"],
                kv_cache_spec_sliding_window=step.get("window"),
            )
        ]
    if "gpu_remove" in step:
        hashes = [wire(h) for h in step["gpu_remove"]]
        return [BlockRemoved(block_hashes=hashes, medium="GPU", group_idx=step["group"])]
    if "offload" in step:
        keys = [make_offload_key(block_hash(h), group) for h, group in step["offload"]]
        event = OffloadingEvent(keys=keys, medium=Medium(step["medium"]), removed=step["removed"])
        return list(tracker.take_events([event]))
    if "described" in step:
        return [
            BlockStored(
                block_hashes=[wire(h) for h in step["described"]],
                parent_block_hash=wire(step["parent"]),
                token_ids=step["tokens"],
                block_size=step["block_size"],
                lora_id=None,
                medium=step["medium"],
                lora_name=None,
                extra_keys=None,
                group_idx=step["group"],
                kv_cache_spec_kind="full_attention",
                kv_cache_spec_sliding_window=None,
            )
        ]
    return [AllBlocksCleared()]


def main() -> int:
    request = json.loads(sys.stdin.read())
    config = OffloadingKVEventsConfig(enable_kv_cache_events=True, self_describing_kv_events=False)
    encoder = msgspec.msgpack.Encoder()
    frames: dict[str, list[str]] = {}
    for name, batches in request["scenarios"].items():
        tracker = OffloadingEventsTracker(config)
        frames[name] = [
            encoder.encode(
                KVEventBatch(
                    ts=float(index),
                    events=[event for step in batch for event in events_of(step, tracker)],
                )
            ).hex()
            for index, batch in enumerate(batches)
        ]
    print(json.dumps({"frames": frames}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
