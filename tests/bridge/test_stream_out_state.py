"""The pieces of a stream-out run that need no peer: the follower's state as batches (parent
before child, tombstones after, sources without blocks left out), the snapshot socket's answers
(cut on the stream's seq, refusals counted, unavailable before the run starts), chunking; and
replicas that keep no token ids refused by every piece that would send them."""

from __future__ import annotations

import random
from pathlib import Path

import msgpack
import pytest

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockStored,
    BlockSWAEvicted,
    EventBatch,
    encode_batch,
)
from cache.events.liveness import encode_liveness, heartbeat, offline
from consumers import ReplicaSet
from log import open_log
from swa_es.egress import sglang_snapshot
from swa_es.egress.bootstrap import (
    TokenIdsNotKeptError,
    follower_capture,
    follower_state,
    replica_lookup,
    source_state,
    state_batches,
)
from swa_es.egress.config import EgressConfig, TombstonePolicy
from swa_es.egress.snapshot import CUT_EMPTY, CUT_UNAVAILABLE, SnapshotServer, chunks
from swa_es.egress.stream import StreamStart, ZmqEgress


def replicas_with_tree(*, keep_tokens: bool = True) -> ReplicaSet:
    """Source ``a``: a root with two children, one tombstoned; source ``b``: cleared, empty."""
    replicas = ReplicaSet(keep_tokens=keep_tokens)
    meta = BatchMeta(page_size=2, sliding_window_size=4)
    events = (
        AllBlocksCleared(),
        BlockStored((1,), None, (1, 1), 2),
        BlockStored((2,), 1, (2, 2), 2),
        BlockStored((3,), 1, (3, 3), 2),
        BlockStored((4,), 3, (4, 4), 2),
        BlockSWAEvicted((2,)),
    )
    replicas.apply(EventBatch("a", "e", 0, 1.0, events, meta=meta))
    replicas.apply(EventBatch("b", "e", 0, 1.0, (AllBlocksCleared(),), meta=meta))
    return replicas


def test_state_is_parent_first_with_tombstones_last() -> None:
    (batch,) = state_batches(replicas_with_tree(), ts=5.0)
    assert batch.source == "a" and batch.ts == 5.0 and batch.meta is not None
    assert isinstance(batch.events[0], AllBlocksCleared)
    stores = [e for e in batch.events if isinstance(e, BlockStored)]
    seen: set[int] = set()
    for store in stores:
        assert store.parent_block_hash is None or store.parent_block_hash in seen
        seen.update(store.block_hashes)
    assert seen == {1, 2, 3, 4}
    assert batch.events[-1] == BlockSWAEvicted((2,))


def test_replicas_without_token_ids_are_refused_never_sent() -> None:
    """The stream out sends token ids: replicas that keep none are refused at once, by the
    state, the snapshot capture and the residency lookup alike, and a block read from them
    is never sent without its tokens."""
    bare = replicas_with_tree(keep_tokens=False)
    assert not bare.keeps_tokens and bare["a"].block(2).token_ids is None
    refusals = (
        lambda: state_batches(bare),
        lambda: follower_state(0, bare),
        lambda: follower_capture(lambda: True, lambda: 0, bare),
        lambda: replica_lookup(bare),
        lambda: source_state("a", bare["a"].blocks(), 1.0),
    )
    for refused in refusals:
        with pytest.raises(TokenIdsNotKeptError, match="keep none"):
            refused()
    kept = replicas_with_tree()
    assert kept["a"].block(2).token_ids == (2, 2)
    assert replica_lookup(kept)("a", 2) == (1, (2, 2))


def test_chunks_keep_order_and_limit() -> None:
    events = tuple(BlockStored((i,), None, (i, i), 2) for i in range(10))
    batch = EventBatch("a", "", 0, 1.0, events)
    parts = chunks(batch, limit=4)
    assert [len(p.events) for p in parts] == [4, 4, 2]
    assert tuple(e for p in parts for e in p.events) == events


async def test_snapshot_answers_cut_refusals_and_sglang(tmp_path: Path) -> None:
    replicas = replicas_with_tree()
    state = state_batches(replicas)
    async with await open_log(f"file://{tmp_path}/log") as log:
        await log.append_batch([("a", encode_batch(EventBatch("a", "e", 0, 1.0, ())))] * 7)
        config = EgressConfig(publish_endpoint=f"ipc://{tmp_path}/pub", wire_format="vllm")
        async with ZmqEgress(log, config, deferred=True) as egress:
            captured: list[tuple[int, list[EventBatch]]] = []
            server = SnapshotServer(egress, f"ipc://{tmp_path}/snap", lambda: captured[-1])
            # before the run starts: unavailable, counted
            assert server.answer(b"snapshot")[0] == CUT_UNAVAILABLE.to_bytes(8, "big", signed=True)
            assert server.metrics.unavailable == 1
            egress.begin(StreamStart(5, tuple(state)))
            assert egress.seq_of(5) == 1 and egress.offset_of(0) is None
            captured.append((7, state))  # the follower is at offset 7: seqs 1 and 2 applied
            cut, epoch, *payloads = server.answer(b"snapshot")
            assert int.from_bytes(cut, "big", signed=True) == 2 and epoch == egress.epoch
            _ts, events, rank = msgpack.unpackb(payloads[0])
            assert rank == 0 and events[0] == {"type": "AllBlocksCleared"}
            # anything else: the protocol's refusal, counted
            assert server.answer(b"SNAPSHOT")[0] == CUT_UNAVAILABLE.to_bytes(8, "big", signed=True)
            assert server.metrics.bad_requests == 1
            (kind, _payload), *_ = server.answer_sglang(b"snapshot-v7")
            assert kind == b"error" and server.metrics.bad_requests == 2
            replies = server.answer_sglang(sglang_snapshot.V2)
            header = msgpack.unpackb(replies[0][1])
            assert (header["barrier_seq"], header["resume_seq"], header["record_count"]) == (
                2,
                3,
                4,
            )
            records = msgpack.unpackb(replies[1][1])
            masks = {r["block_hash"]: r["component_mask"] for r in records}
            assert masks == {1: 3, 2: 1, 3: 3, 4: 3}
        # an empty follower at the run's start: nothing to apply
        other = EgressConfig(publish_endpoint=f"ipc://{tmp_path}/pub2", wire_format="vllm")
        async with ZmqEgress(log, other, deferred=True) as fresh:
            fresh.begin(StreamStart(5))
            empty = SnapshotServer(fresh, f"ipc://{tmp_path}/snap2", lambda: (5, []))
            assert empty.answer(b"snapshot") == [
                CUT_EMPTY.to_bytes(8, "big", signed=True),
                fresh.epoch,
            ]


def test_sglang_refuses_a_stream_of_several_sources() -> None:
    rng = random.Random(0)
    state = [
        EventBatch(
            name, "", 0, 1.0, (AllBlocksCleared(), BlockStored((rng.randrange(9),), None, (1,), 1))
        )
        for name in ("a", "b")
    ]
    (kind, payload), *_ = sglang_snapshot.replies(
        sglang_snapshot.V1, state, 3, b"\0" * 16, TombstonePolicy.KEEP
    )
    assert kind == b"error" and "2 sources" in msgpack.unpackb(payload)["message"]


async def test_liveness_records_keep_their_place_as_empty_batches(tmp_path: Path) -> None:
    """A heartbeat or offline marker in the log (``cache.events.liveness``) goes out as an empty
    engine batch at its own seq: the stream has no hole a router would take for lost batches,
    and nothing is counted undecodable."""
    stored = EventBatch("a", "e", 0, 1.0, (AllBlocksCleared(), BlockStored((1,), None, (1, 1), 2)))
    records = [
        encode_batch(stored),
        encode_liveness(heartbeat("a", "e", 0)),
        encode_batch(EventBatch("a", "e", 1, 2.0, (BlockStored((2,), 1, (2, 2), 2),))),
        encode_liveness(offline("a", "e", 1, "stopped")),
    ]
    async with await open_log(f"file://{tmp_path}/log") as log:
        await log.append_batch([("a", payload) for payload in records])
        config = EgressConfig(publish_endpoint=f"ipc://{tmp_path}/pub", wire_format="sglang")
        async with ZmqEgress(log, config, deferred=True) as egress:
            egress.begin(StreamStart(0))
            frames = []
            async for record in log.read("beginning"):
                frame = egress.frames(record)
                assert frame is not None
                frames.append(frame)
    assert [int.from_bytes(seq, "big") for _topic, seq, _payload in frames] == [0, 1, 2, 3]
    events = [msgpack.unpackb(payload)[1] for _topic, _seq, payload in frames]
    assert [len(batch) for batch in events] == [2, 0, 1, 0]
    assert egress.metrics.undecodable == 0


def replicas_with_tiers() -> ReplicaSet:
    """Source ``a`` of ``replicas_with_tree`` whose host memory holds block 3 (also on the GPU)
    and block 9 (on no other tier), and whose storage holds block 1."""
    replicas = replicas_with_tree()
    events = (
        BlockStored((3,), 1, (3, 3), 2, None, "CPU"),
        BlockStored((9,), 4, (9, 9), 2, None, "CPU"),
        BlockStored((1,), None, (1, 1), 2, None, "STORAGE"),
    )
    replicas.apply(EventBatch("a", "e", 1, 2.0, events))
    return replicas


def test_state_ends_with_each_lower_tiers_blocks() -> None:
    """After the GPU's blocks and tombstones, each lower tier's blocks: with the GPU copy's
    parent and tokens where the GPU holds them too, else as vLLM's offload placeholder."""
    (batch,) = state_batches(replicas_with_tiers(), ts=5.0)
    tiered = [e for e in batch.events if isinstance(e, BlockStored) and e.medium != "GPU"]
    assert tiered == [
        BlockStored((3,), 1, (3, 3), 2, None, "CPU"),
        BlockStored((9,), None, (), 0, None, "CPU"),
        BlockStored((1,), None, (1, 1), 2, None, "STORAGE"),
    ]
    assert batch.events[-len(tiered) - 1] == BlockSWAEvicted((2,))


def test_sglang_snapshot_v2_names_each_records_tier_and_v1_only_the_gpus() -> None:
    """Version 2 records carry the tier (host 2, storage 3) with FULL only and the tier masks
    say which tiers hold FULL; version 1, which has no tiers, lists the GPU's blocks."""
    state = state_batches(replicas_with_tiers())
    epoch = b"\x01" * 8
    for request, expected in ((sglang_snapshot.V1, 4), (sglang_snapshot.V2, 7)):
        replies = sglang_snapshot.replies(request, state, 3, epoch, TombstonePolicy.KEEP)
        header = msgpack.unpackb(replies[0][1])
        records = [
            r for kind, payload in replies if kind == b"chunk" for r in msgpack.unpackb(payload)
        ]
        assert len(records) == header["record_count"] == expected
        if request == sglang_snapshot.V2:
            lower = {
                (r["block_hash"], r["tier"], r["component_mask"], r["block_size"])
                for r in records
                if r["tier"] != 1
            }
            assert lower == {(3, 2, 1, 2), (9, 2, 1, 2), (1, 3, 1, 2)}
            spec = header["cache_spec"]
            assert (spec["full_tier_mask"], spec["swa_tier_mask"]) == (0b111, 0b001)
