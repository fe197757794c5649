"""The replies of sglang's proposed worker snapshot (sgl-project/sglang#34407, read by the
sgl-kv-indexer snapshot client) for a stream-out run, written from the protocol text.

A DEALER sends ``["", "snapshot-v1"]`` or ``["", "snapshot-v2"]``; each reply is
``["", kind, payload]`` with ``kind`` one of ``header``, ``chunk``, ``end``, ``error`` and a
msgpack payload:

- ``header``: ``version``, ``epoch``, ``replica_rank``, ``resume_seq``, ``barrier_seq``,
  ``barrier_id``, ``record_count``; version 2 adds ``namespace``, ``model``, ``worker_id``,
  ``worker_generation``, ``hash_schema_version``, ``page_size``, ``is_bigram`` and
  ``cache_spec`` (``version``, ``components``, ``swa_window_tokens``, ``full_tier_mask``,
  ``swa_tier_mask``, ``mamba_tier_mask``). ``barrier_seq`` is the stream seq the records
  include (our cut), ``resume_seq`` the next one.
- ``chunk``: a list of records, parent before child: version 1
  ``{parent_block_hash, block_hashes}``, version 2 ``{parent_block_hash, block_hash, tier,
  component_mask, block_size}`` (tier 1 the GPU, 2 host memory, 3 storage; component FULL=1,
  SWA=2: a tombstoned block holds its full KV only, so version 2 carries our SWA residency; a
  lower tier's copy is said to hold FULL, since no engine reports SWA per lower tier). Version
  1 has no tiers: its records are the GPU's.
- ``end``: ``record_count`` and ``barrier_seq`` again; ``error``: ``message``.

The protocol describes one worker: a stream carrying several sources gets an ``error``. The
records follow the stream's tombstone policy (``remove``: tombstoned blocks are left out, as
the stream removed them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from cache.events import MEDIUM_GPU, BlockStored, BlockSWAEvicted, EventBatch
from swa_es.egress.config import TombstonePolicy

V1 = b"snapshot-v1"
V2 = b"snapshot-v2"
VERSIONS = {V1: 1, V2: 2}
FULL, SWA, MAMBA = 1, 2, 4
GPU_TIER = 1
HOST_TIER = 2
STORAGE_TIER = 3
TIER_OF_MEDIUM = {"CPU": HOST_TIER, "CPU_PINNED": HOST_TIER, "STORAGE": STORAGE_TIER}
"""The protocol's tier of each lower medium we know; any other (``DISK``, ``EXTERNAL``, ...) is
storage."""
CHUNK_RECORDS = 4096
MAX_RECORDS = 10_000_000
HASH_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class _Record:
    parent: int | None
    block_hash: int
    block_size: int
    resident: bool
    tier: int = GPU_TIER


def _tier(medium: str | None) -> int:
    if medium in (None, MEDIUM_GPU):
        return GPU_TIER
    return TIER_OF_MEDIUM.get(medium, STORAGE_TIER)


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def error(message: str) -> list[tuple[bytes, bytes]]:
    """The protocol's error reply."""
    return [(b"error", _pack({"message": message}))]


def _records(batch: EventBatch, tombstones: TombstonePolicy, version: int) -> list[_Record]:
    tombstoned = {
        block_hash
        for event in batch.events
        if isinstance(event, BlockSWAEvicted)
        for block_hash in event.block_hashes
    }
    page_size = 0 if batch.meta is None else batch.meta.page_size
    records = [
        _Record(
            event.parent_block_hash,
            event.block_hashes[0],
            event.block_size or page_size,  # a tier-only block's store is a placeholder
            tier != GPU_TIER or event.block_hashes[0] not in tombstoned,
            tier,
        )
        for event in batch.events
        if isinstance(event, BlockStored)
        for tier in [_tier(event.medium)]
        if tier == GPU_TIER or version >= 2
    ]
    if tombstones is TombstonePolicy.REMOVE:
        return [record for record in records if record.resident]
    return records


def _record(record: _Record, version: int) -> dict[str, Any]:
    if version == 1:
        return {"parent_block_hash": record.parent, "block_hashes": [record.block_hash]}
    return {
        "parent_block_hash": record.parent,
        "block_hash": record.block_hash,
        "tier": record.tier,
        "component_mask": FULL | SWA if record.resident and record.tier == GPU_TIER else FULL,
        "block_size": record.block_size,
    }


def _tier_mask(tiers: set[int]) -> int:
    """Tiers ``1..3`` as the bits ``1 << (tier - 1)``."""
    return sum(1 << (tier - 1) for tier in tiers)


def replies(
    request: bytes,
    state: list[EventBatch],
    cut: int,
    epoch: bytes,
    tombstones: TombstonePolicy,
) -> list[tuple[bytes, bytes]]:
    """The ``(kind, payload)`` replies to ``request`` (``snapshot-v1``/``-v2``) for the
    state ``state`` (one batch per source) whose last stream seq is ``cut``."""
    version = VERSIONS[request]
    sources = [batch for batch in state if batch.events]
    if len(sources) > 1:
        names = ", ".join(batch.source for batch in sources)
        return error(f"the stream carries {len(sources)} sources ({names}); a snapshot is one's")
    records = _records(sources[0], tombstones, version) if sources else []
    if len(records) > MAX_RECORDS:
        return error(f"{len(records)} records: more than the protocol's {MAX_RECORDS}")
    run = epoch.hex()
    header: dict[str, Any] = {
        "version": version,
        "epoch": run,
        "replica_rank": 0,
        "resume_seq": cut + 1,
        "barrier_seq": cut,
        "barrier_id": f"{run}:{cut}",
        "record_count": len(records),
    }
    if version == 2:
        meta = sources[0].meta if sources else None
        header |= {
            "namespace": None,
            "model": None,
            "worker_id": sources[0].source if sources else None,
            "worker_generation": run,
            "hash_schema_version": HASH_SCHEMA_VERSION,
            "page_size": None if meta is None else meta.page_size,
            "is_bigram": False,
            "cache_spec": {
                "version": 1,
                "components": FULL | SWA,
                "swa_window_tokens": None if meta is None else meta.sliding_window_size,
                "full_tier_mask": _tier_mask({GPU_TIER} | {r.tier for r in records}),
                "swa_tier_mask": _tier_mask({GPU_TIER}),
                "mamba_tier_mask": 0,
            },
        }
    out = [(b"header", _pack(header))]
    for at in range(0, len(records), CHUNK_RECORDS):
        chunk = [_record(record, version) for record in records[at : at + CHUNK_RECORDS]]
        out.append((b"chunk", _pack(chunk)))
    out.append((b"end", _pack({"record_count": len(records), "barrier_seq": cut})))
    return out
