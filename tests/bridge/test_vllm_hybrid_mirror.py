"""vLLM hybrid KV-cache groups through the decoder and the mirror, with batches built here in
the shapes vLLM 0.33.0 sends (docs: the bridge section of docs/design.md §8): a dense
full-attention store, a sparse or empty sliding-window store, one hash per removal, CPU-offload
placeholders; bad input is a typed error naming the field, and through a running bridge the
source becomes unknown without losing what it published before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
import zmq
import zmq.asyncio

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    EventBatch,
)
from consumers import Follower, PrefixIndex, ReplicaSet
from log import open_log
from swa_es.bridge.formats import EngineStored, WireFormat, decode_batch
from swa_es.bridge.ingest import Bridge
from swa_es.bridge.mirror import MirrorCache, MirrorError
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews

BLOCK = 4
WINDOW = 9  # vLLM needs ceil((9 - 1) / 4) = 2 blocks; the SWA rule's window is 8
TOKENS = list(range(100, 100 + 6 * BLOCK))  # six blocks, vLLM keys 1..6


def stored(group: int, keys: list[int], parent: int | None, tokens: list[int]) -> dict[str, Any]:
    full = group == 0
    return {
        "type": "BlockStored",
        "block_hashes": keys,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": BLOCK,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [None] * len(keys) if keys else None,
        "group_idx": group,
        "kv_cache_spec_kind": "full_attention" if full else "sliding_window",
        "kv_cache_spec_sliding_window": None if full else WINDOW,
    }


def removed(group: int, key: int) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": [key], "medium": "GPU", "group_idx": group}


def pack(*events: dict[str, Any]) -> bytes:
    payload: bytes = msgpack.packb([1.0, list(events), 0], use_bin_type=True)
    return payload


def apply(mirror: MirrorCache, *events: dict[str, Any]) -> None:
    for event in decode_batch(pack(*events), WireFormat.VLLM).events:
        mirror.apply(event)


def prefill(mirror: MirrorCache) -> None:
    """One prompt of six blocks: group 0 dense, group 1 sparse (only blocks 3 and 4 hashed,
    the run a hit at the replay boundary needs), token_ids spanning all six."""
    apply(mirror, stored(0, [1, 2, 3, 4, 5, 6], None, TOKENS), stored(1, [3, 4], None, TOKENS))


def hashes(mirror: MirrorCache, *keys: int) -> tuple[int, ...]:
    return tuple(mirror.our_hash(key) or 0 for key in keys)


def index_of(mirror: MirrorCache) -> PrefixIndex:
    replicas = ReplicaSet()
    events = (AllBlocksCleared(), *mirror.snapshot_events())
    replicas.apply(EventBatch("vh", "e", 0, 0.0, events, meta=mirror.meta()))
    assert replicas["vh"].state_digest() == mirror.state_digest()
    return PrefixIndex(replicas)


def answer(index: PrefixIndex, tokens: list[int]) -> tuple[int | None, int | None]:
    found = index.match(tokens).get("vh")
    return (0, 0) if found is None else (found.full_tokens, found.swa_tokens)


def test_the_first_hybrid_batch_decodes_and_sparse_stores_keep_their_span() -> None:
    batch = decode_batch(
        pack(
            stored(0, [1, 2, 3, 4, 5, 6], None, TOKENS),
            stored(1, [3, 4], None, TOKENS),
            stored(1, [], 6, list(range(BLOCK))),  # a decode block: no hash, one block of tokens
        ),
        WireFormat.VLLM,
    )
    sparse, empty = batch.events[1], batch.events[2]
    assert isinstance(sparse, EngineStored) and sparse.block_hashes == (3, 4)
    assert len(sparse.token_ids) == 6 * BLOCK and sparse.group_kind == "sliding_window"
    assert isinstance(empty, EngineStored) and empty.block_hashes == ()
    with pytest.raises(Exception, match="token_ids"):  # a full-attention store stays dense
        decode_batch(pack(stored(0, [1, 2], None, TOKENS)), WireFormat.VLLM)


def test_swa_residency_comes_from_the_sliding_window_group() -> None:
    mirror = MirrorCache()
    prefill(mirror)
    events = mirror.take_events()
    assert [type(event) for event in events] == [BlockStored] * 6 + [BlockSWAEvicted]
    assert events[-1] == BlockSWAEvicted(hashes(mirror, 1, 2, 5, 6))  # tombstones from birth
    meta = mirror.meta()
    assert meta.swa_events and meta.sliding_window_size == WINDOW - 1
    assert meta["engine_sliding_window"] == WINDOW and meta["swa_residency"] == "events"
    index = index_of(mirror)
    # vLLM's hybrid hit: the 2 blocks before the end cached in group 1 -> ends after block 4.
    assert answer(index, TOKENS) == (24, 16)
    assert answer(index, TOKENS[:8]) == (8, 0)  # blocks 1-2 tombstones, not a prefix run

    apply(mirror, removed(1, 4))  # group 1 evicts block 4's copy: no run of 2 is left
    assert mirror.take_events() == [BlockSWAEvicted(hashes(mirror, 4))]
    assert answer(index_of(mirror), TOKENS) == (24, 0)
    apply(mirror, stored(1, [4, 5], 3, TOKENS[3 * BLOCK :]))  # stored again, and block 5
    assert mirror.take_events() == [BlockSWARestored(hashes(mirror, 4, 5))]
    assert answer(index_of(mirror), TOKENS) == (24, 20)


def test_copies_are_counted_per_hash_and_group() -> None:
    mirror = MirrorCache()
    prefill(mirror)
    apply(mirror, stored(0, [5, 6], 4, TOKENS[4 * BLOCK :]))  # recomputed: second copies
    mirror.take_events()
    apply(mirror, removed(0, 6))
    assert mirror.take_events() == [] and mirror.our_hash(6) is not None  # a copy still serves
    gone = mirror.our_hash(6) or 0
    apply(mirror, removed(0, 6))
    assert mirror.take_events() == [BlockRemoved((gone,), reason="evicted")]
    assert mirror.counters.repeated_stores == 2


def test_a_plain_engine_reports_why_it_has_no_residency() -> None:
    mirror = MirrorCache()
    apply(mirror, stored(0, [1, 2], None, TOKENS[: 2 * BLOCK]))
    meta = mirror.meta()
    assert not meta.swa_events
    assert meta["swa_residency"] == "none: vLLM declared no sliding-window KV-cache group"
    assert answer(index_of(mirror), TOKENS) == (8, None)


def test_cpu_offload_placeholders_of_unknown_blocks_are_counted() -> None:
    placeholder = {
        "type": "BlockStored",
        "block_hashes": [77],
        "parent_block_hash": None,
        "token_ids": [],
        "block_size": 0,
        "lora_id": None,
        "medium": "CPU",
        "group_idx": 0,
    }
    mirror = MirrorCache()
    prefill(mirror)
    apply(mirror, placeholder, {**removed(0, 77), "medium": "CPU"})
    counters = mirror.tiers.counters
    assert counters.unplaced_tier_blocks == counters.unplaced_tier_removals == 1
    assert len(mirror) == 6
    with pytest.raises(Exception, match="block_size"):
        decode_batch(pack({**placeholder, "medium": "GPU"}), WireFormat.VLLM)


@pytest.mark.parametrize(
    ("events", "field"),
    [
        ([removed(2, 1)], "group_idx"),  # a group no store declared
        (
            [stored(1, [5], 4, TOKENS[4 * BLOCK :]) | {"kv_cache_spec_sliding_window": 17}],
            "kv_cache_spec_sliding_window",
        ),
        ([stored(1, [6, 5], 4, TOKENS[4 * BLOCK :])], "block_hashes[1]"),  # out of order
        ([stored(1, [5], 4, TOKENS[3 * BLOCK :])], "block_hashes[0]"),  # tokens of another block
        ([stored(1, [99], 4, TOKENS[4 * BLOCK :])], "block_hashes[0]"),  # no full-group block
        ([stored(1, [5, 6], 4, TOKENS[4 * BLOCK : 5 * BLOCK])], "token_ids"),  # span too short
        ([removed(1, 2)], "block_hashes[0]"),  # group 1 holds no copy of block 2
    ],
)
def test_bad_hybrid_input_is_a_typed_error_naming_the_field(
    events: list[dict[str, Any]], field: str
) -> None:
    mirror = MirrorCache()
    prefill(mirror)
    try:
        batch = decode_batch(pack(*events), WireFormat.VLLM)
    except Exception as exc:  # the decoder refuses some shapes itself (FrameError)
        assert field in str(exc)
        return
    with pytest.raises(MirrorError) as caught:
        for event in batch.events:
            mirror.apply(event)
    assert caught.value.field == field


async def poll_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the caller's ``fail_after`` bounds the wait)."""
    while True:
        if condition():
            return
        await anyio.sleep(0.05)


async def test_a_running_bridge_marks_the_source_unknown_and_keeps_what_came_before(
    tmp_path: Path,
) -> None:
    endpoint = f"ipc://{tmp_path}/engine.pub"
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    pub.bind(endpoint)
    first = pack(stored(0, [1, 2, 3, 4, 5, 6], None, TOKENS), stored(1, [3, 4], None, TOKENS))
    window_changed = stored(1, [5], 4, TOKENS[4 * BLOCK :])
    window_changed["kv_cache_spec_sliding_window"] = WINDOW + 4
    try:
        async with await open_log(f"file://{tmp_path}/log") as log:
            async with (
                Bridge(log, endpoint=endpoint, source="vh", wire_format="vllm") as bridge,
                anyio.create_task_group() as tasks,
            ):
                tasks.start_soon(bridge.run)
                with anyio.fail_after(30):
                    while bridge.metrics.received == 0:  # the slow joiner
                        await pub.send_multipart([b"", (0).to_bytes(8, "big"), first])
                        await anyio.sleep(0.05)
                    await pub.send_multipart([b"", (1).to_bytes(8, "big"), pack(window_changed)])
                    await poll_until(lambda: bridge.lost is not None)
                lost = bridge.lost or ""
                assert "engine batch 1" in lost and "kv_cache_spec_sliding_window" in lost
                tasks.cancel_scope.cancel()
            replicas = ReplicaSet()
            await Follower(log, [replicas]).catch_up()
            tree = replicas["vh"]
            assert tree.diverged is not None  # unknown: never guessed
            assert len(tree) == 6  # the first batch is still in the log
    finally:
        pub.close(linger=0)
        context.term()


@pytest.mark.parametrize(
    ("first", "residency", "usable"),
    [
        (
            pack(stored(0, [1, 2], None, TOKENS[: 2 * BLOCK])),
            "none: vLLM declared no sliding-window KV-cache group",
            None,
        ),
        (
            pack(
                stored(0, [1, 2], None, TOKENS[: 2 * BLOCK]),
                stored(1, [1, 2], None, TOKENS[: 2 * BLOCK]),
            ),
            "events",
            8,
        ),
    ],
    ids=["plain", "hybrid"],
)
async def test_sources_say_whether_usable_lengths_are_answered(
    tmp_path: Path, first: bytes, residency: str, usable: int | None
) -> None:
    """``/v1/sources`` says ``swa_residency`` (``events``, or ``none: <reason>``) and
    ``/v1/match`` answers ``usable_tokens`` accordingly (null for a plain engine)."""
    endpoint = f"ipc://{tmp_path}/engine.pub"
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    pub.bind(endpoint)
    try:
        async with (
            await open_log(f"file://{tmp_path}/log") as log,
            Bridge(log, endpoint=endpoint, source="vh", wire_format="vllm") as bridge,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(bridge.run)
            with anyio.fail_after(30):
                while bridge.metrics.received == 0:  # the slow joiner
                    await pub.send_multipart([b"", (0).to_bytes(8, "big"), first])
                    await anyio.sleep(0.05)
                await poll_until(lambda: bridge.publisher is not None)
                assert bridge.publisher is not None
                await bridge.publisher.flush(timeout_s=30)
            views = StandardViews.create()
            follower = Follower(log, views.all)
            await follower.catch_up()
            routing = FollowerRouting(follower, views)
            assert routing.sources()["vh"]["swa_residency"] == residency
            answer = routing.match(TOKENS, None)["vh"]
            assert answer["state"] == "exact"
            assert (answer["cached_tokens"], answer["usable_tokens"]) == (8, usable)
            tasks.cancel_scope.cancel()
    finally:
        pub.close(linger=0)
        context.term()


def test_several_full_groups_hold_a_block_only_together() -> None:
    """vLLM's lookup needs a hash in every group of a kind: a block is held while every
    full-attention group holds a copy (here groups 0 and 2; group 1 is the sliding window)."""
    chain = TOKENS[: 2 * BLOCK]
    mirror = MirrorCache()
    apply(
        mirror,
        stored(0, [1, 2], None, chain),
        stored(1, [1, 2], None, chain),
        {**stored(0, [1, 2], None, chain), "group_idx": 2},
    )
    assert len(mirror) == 2
    index = index_of(mirror)
    assert answer(index, TOKENS) == (8, 8)
    apply(mirror, {**removed(0, 2), "group_idx": 2})  # group 2 lost block 2, group 0 holds it
    assert len(mirror) == 1
    assert answer(index_of(mirror), TOKENS) == (4, 4)
    apply(mirror, {**stored(0, [2], 1, TOKENS[BLOCK : 2 * BLOCK]), "group_idx": 2})
    assert len(mirror) == 2 and mirror.resident(2) is True


def test_a_group_of_a_kind_not_modeled_is_reported() -> None:
    mamba = {**stored(0, [1, 2], None, TOKENS[: 2 * BLOCK]), "group_idx": 2}
    mamba["kv_cache_spec_kind"] = "mamba"
    mirror = MirrorCache()
    prefill(mirror)
    assert mirror.meta().swa_events
    apply(mirror, mamba)
    assert mirror.meta_stale  # the bridge opens an epoch whose meta says why
    meta = mirror.meta()
    assert not meta.swa_events
    assert (
        meta["swa_residency"] == "none: vLLM KV-cache group(s) 2 (mamba) are of a kind not modeled"
    )
    assert mirror.resident(1) is True  # no tombstones where residency is not modeled


def test_a_second_sliding_window_group_must_hold_a_block_too() -> None:
    mirror = MirrorCache()
    prefill(mirror)
    apply(mirror, {**stored(1, [], 6, list(range(BLOCK))), "group_idx": 2})  # empty, declares
    assert mirror.resident(3) is False and mirror.resident(4) is False
    apply(mirror, {**stored(1, [3, 4], None, TOKENS), "group_idx": 2})
    assert mirror.resident(3) is True and mirror.resident(4) is True
    assert answer(index_of(mirror), TOKENS) == (24, 16)
