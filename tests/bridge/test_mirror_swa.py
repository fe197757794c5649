"""The mirror follows an engine's SWA residency (``EngineSWAResidency``): tombstones and restores
become ``BlockSWAEvicted`` / ``BlockSWARestored``, the window comes from the events, and from the
first such event on the source's meta says it reports SWA residency, so ``PrefixIndex`` answers
usable lengths for it. Engine batches are built here, in sglang's wire form (tagged maps)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
import zmq
import zmq.asyncio

from cache.events import AllBlocksCleared, BlockSWAEvicted, BlockSWARestored, EventBatch
from consumers import Follower, PrefixIndex, ReplicaSet
from log import open_log
from swa_es.bridge.formats import EngineRemoved, EngineStored, EngineSWAResidency
from swa_es.bridge.ingest import Bridge
from swa_es.bridge.mirror import NO_RESIDENCY_YET, MirrorCache, MirrorError

SOURCE = "sg"
PAGE = 2
WINDOW = 4
TOKENS = list(range(1, 9))  # four pages: keys 1, 2, 3, 4


def chain() -> EngineStored:
    """Four pages of ``TOKENS`` under engine keys 1..4, one event (vLLM's multi-block form)."""
    return EngineStored((1, 2, 3, 4), None, tuple(TOKENS), PAGE, "GPU")


class Replica:
    """A follower's replica fed the mirror's events batch by batch, as a publisher would."""

    def __init__(self, mirror: MirrorCache) -> None:
        self.mirror = mirror
        self.replicas = ReplicaSet()
        self.index = PrefixIndex(self.replicas)
        self.seq = 0

    def sync(self) -> None:
        events = self.mirror.take_events()
        meta = self.mirror.meta() if self.seq == 0 else None
        if self.seq == 0:
            events = [AllBlocksCleared(), *events]
        batch = EventBatch(SOURCE, "e1", self.seq, 0.0, tuple(events), meta=meta)
        self.replicas.apply(batch)
        self.seq += 1
        assert self.replicas[SOURCE].state_digest() == self.mirror.state_digest()

    def match(self, tokens: Sequence[int]) -> tuple[int | None, int | None]:
        found = self.index.match(tokens).get(SOURCE)
        return (0, 0) if found is None else (found.full_tokens, found.swa_tokens)


def reopened(mirror: MirrorCache) -> Replica:
    """A replica built from the mirror's snapshot (a new epoch's opening)."""
    replica = Replica(MirrorCache())
    batch = EventBatch(
        SOURCE, "e2", 0, 0.0, (AllBlocksCleared(), *mirror.snapshot_events()), meta=mirror.meta()
    )
    replica.replicas.apply(batch)
    assert replica.replicas[SOURCE].state_digest() == mirror.state_digest()
    return replica


def residency(keys: tuple[int, ...], resident: bool, window: int = WINDOW) -> EngineSWAResidency:
    return EngineSWAResidency(keys, resident, window)


def test_tombstones_and_restores_follow_the_sliding_window_rule() -> None:
    mirror = MirrorCache()
    mirror.apply(chain())
    assert not mirror.meta().swa_events
    assert mirror.meta()["swa_residency"] == NO_RESIDENCY_YET
    replica = Replica(mirror)
    replica.sync()
    assert replica.match(TOKENS) == (8, None)  # no residency reported: usable unknown

    mirror.apply(residency((2,), resident=False))
    assert mirror.meta_stale  # the bridge opens a new epoch with the new meta
    events = mirror.take_events()
    assert events == [BlockSWAEvicted((mirror.our_hash(2) or 0,))]
    meta = mirror.meta()
    assert meta.swa_events and meta.sliding_window_size == WINDOW
    assert meta["swa_residency"] == "events"
    assert not mirror.meta_stale
    replica = reopened(mirror)
    # page 2 tombstoned, pages 3-4 (4 tokens) resident after it: the window is covered.
    assert replica.match(TOKENS) == (8, 8)
    assert replica.match(TOKENS[:6]) == (6, 2)  # only 2 resident tokens after the tombstone

    mirror.apply(residency((3,), resident=False))
    mirror.apply(residency((3,), resident=False))  # already a tombstone: no event
    replica.mirror = mirror
    replica.seq = 1
    replica.sync()
    assert replica.match(TOKENS) == (8, 2)

    mirror.apply(residency((2, 3), resident=True))
    assert mirror.take_events() == [
        BlockSWARestored((mirror.our_hash(2) or 0, mirror.our_hash(3) or 0))
    ]
    assert reopened(mirror).match(TOKENS) == (8, 8)


def test_snapshot_carries_the_tombstones() -> None:
    mirror = MirrorCache()
    mirror.apply(chain())
    mirror.apply(residency((1, 3), resident=False))
    snapshot = mirror.snapshot_events()
    assert snapshot[-1] == BlockSWAEvicted((mirror.our_hash(1) or 0, mirror.our_hash(3) or 0))
    assert reopened(mirror).match(TOKENS) == (8, 0)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (residency((2,), resident=False, window=8), "sliding_window_size"),
        (residency((2, 9), resident=False), "block_hashes[1]"),
        (residency((2,), resident=True, window=0), "sliding_window_size"),
    ],
)
def test_bad_residency_is_a_typed_error_and_changes_nothing(
    event: EngineSWAResidency, field: str
) -> None:
    mirror = MirrorCache()
    mirror.apply(chain())
    mirror.apply(residency((1,), resident=False))
    mirror.take_events()
    digest = mirror.state_digest()
    with pytest.raises(MirrorError) as caught:
        mirror.apply(event)
    assert caught.value.field == field
    assert mirror.state_digest() == digest and mirror.take_events() == []
    assert mirror.resident(2) is True


def test_a_new_engine_run_may_bring_another_window() -> None:
    mirror = MirrorCache()
    mirror.apply(chain())
    mirror.apply(residency((1,), resident=False))
    mirror.reset()
    assert mirror.meta()["swa_residency"] == NO_RESIDENCY_YET
    mirror.apply(chain())
    mirror.apply(residency((1,), resident=False, window=8))
    assert mirror.meta().sliding_window_size == 8


def test_removing_a_block_below_held_ones_is_refused() -> None:
    mirror = MirrorCache()
    mirror.apply(chain())
    with pytest.raises(MirrorError) as caught:
        mirror.apply(EngineRemoved((2,), "GPU"))
    assert caught.value.field == "block_hashes[0]"
    mirror.apply(EngineRemoved((4, 3), "GPU"))  # a node's pages together: fine
    assert len(mirror) == 2


def frame(seq: int, *events: dict[str, Any]) -> list[bytes]:
    """One engine message: topic, seq, a tagged-map batch."""
    payload: bytes = msgpack.packb([float(seq), list(events), 0], use_bin_type=True)
    return [b"", seq.to_bytes(8, "big"), payload]


def swa_event(keys: list[int], resident: bool, window: int = WINDOW) -> dict[str, Any]:
    tag = "BlockSWARestored" if resident else "BlockSWAEvicted"
    return {"type": tag, "block_hashes": keys, "medium": "GPU", "sliding_window_size": window}


async def poll_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the caller's ``fail_after`` bounds the wait)."""
    while True:
        if condition():
            return
        await anyio.sleep(0.02)


async def test_a_running_bridge_opens_an_epoch_that_reports_residency(tmp_path: Path) -> None:
    """Over ZMQ: a stream without residency, then its first tombstone: the bridge opens an epoch
    whose meta reports it, and a follower answers usable lengths; a later window change makes
    the source unknown, naming the engine batch and the field."""
    endpoint = f"ipc://{tmp_path}/engine.pub"
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    pub.bind(endpoint)
    store = {
        "type": "BlockStored",
        "block_hashes": [1, 2, 3, 4],
        "parent_block_hash": None,
        "token_ids": TOKENS,
        "block_size": PAGE,
        "lora_id": None,
        "medium": "GPU",
    }
    try:
        async with (
            await open_log(f"file://{tmp_path}/log") as log,
            Bridge(log, endpoint=endpoint, source=SOURCE, wire_format="sglang") as bridge,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(bridge.run)
            with anyio.fail_after(30):
                while bridge.metrics.received == 0:  # the slow joiner
                    await pub.send_multipart(frame(0, store))
                    await anyio.sleep(0.05)
                await poll_until(lambda: bridge.metrics.epochs == 1)
                await pub.send_multipart(frame(1, swa_event([2], resident=False)))
                await poll_until(
                    lambda: bridge.metrics.epochs == 2 and bridge.publisher is not None
                )
                assert bridge.publisher is not None
                await bridge.publisher.flush(timeout_s=30)
                replicas = ReplicaSet()
                follower = Follower(log, [replicas, PrefixIndex(replicas)])
                await follower.catch_up()
                index = PrefixIndex(replicas)
                found = index.match(TOKENS)[SOURCE]
                assert (found.full_tokens, found.swa_tokens) == (8, 8)
                found = index.match(TOKENS[:6])[SOURCE]
                assert (found.full_tokens, found.swa_tokens) == (6, 2)

                await pub.send_multipart(frame(2, swa_event([3], resident=False, window=8)))
                await poll_until(lambda: bridge.lost is not None)
                lost = bridge.lost or ""
                assert "engine batch 2" in lost and "sliding_window_size" in lost
            tasks.cancel_scope.cancel()
    finally:
        pub.close(linger=0)
        context.term()
