"""The publisher's liveness records on a real in-memory log: heartbeats while idle naming the
last durable batch, the offline marker in order with the batches, pausing and resuming; and a
real ``SWARadixCache`` publishing with heartbeats to a follower that never sees a gap."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from cache import SWAKVAllocator, SWARadixCache
from cache.events import decode_batch
from cache.events.liveness import Liveness, LivenessRecord, decode_liveness, is_liveness
from consumers import Follower
from log import EventLog, MemoryLog
from swa_es import Publisher, PublisherConfig
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews
from tests.swa_es.doubles import FakeCache

BEAT_S = 0.02
WAIT_S = 30.0


async def log_records(log: EventLog) -> list[tuple[str, int, LivenessRecord | None]]:
    """(epoch, seq, None) per batch and (epoch, seq, record) per liveness record, in order."""
    found: list[tuple[str, int, LivenessRecord | None]] = []
    async for record in log.read():
        if is_liveness(record.payload):
            live = decode_liveness(record.payload)
            assert record.key == live.source
            found.append((live.epoch, live.seq, live))
        else:
            batch = decode_batch(record.payload)
            found.append((batch.epoch, batch.seq, None))
    return found


async def wait_heartbeats(pub: Publisher, count: int) -> None:
    with anyio.fail_after(WAIT_S):
        while pub.metrics.heartbeats < count:  # noqa: ASYNC110 -- a counter, not an event
            await anyio.sleep(BEAT_S / 2)


async def test_an_idle_publisher_heartbeats_after_its_last_batch() -> None:
    """Heartbeats come only while idle, each naming the epoch and seq of the last batch
    before it; a batch in between moves the seq on."""
    cache = FakeCache()
    log = MemoryLog()
    async with Publisher(cache, log, "w0", config=PublisherConfig(heartbeat_s=BEAT_S)) as pub:
        await wait_heartbeats(pub, 2)
        cache.store(1)
        pub.step()
        await pub.flush()
        await wait_heartbeats(pub, pub.metrics.heartbeats + 2)
    records = await log_records(log)
    last_seq = -1
    for epoch, seq, live in records:
        assert epoch == pub.epoch
        if live is None:
            last_seq = seq
        else:
            assert live.kind is Liveness.HEARTBEAT and seq == last_seq
    assert [seq for _, seq, live in records if live is None] == [0, 1]
    assert pub.metrics.batches_published == 2 and pub.metrics.offline_markers == 0
    assert records[-1][2] is not None, "no offline marker without offline_on_close"


async def test_a_clean_stop_ends_with_an_offline_marker() -> None:
    """With ``offline_on_close`` the last record is the marker, after the last step's batch."""
    cache = FakeCache()
    log = MemoryLog()
    config = PublisherConfig(offline_on_close=True)
    async with Publisher(cache, log, "w0", config=config) as pub:
        cache.store(1)
        pub.step()
        cache.store(2, 1)  # published by the final step, before the marker
    records = await log_records(log)
    assert [(seq, live is None) for _, seq, live in records] == [
        (0, True),
        (1, True),
        (2, True),
        (2, False),
    ]
    marker = records[-1][2]
    assert marker is not None and marker.kind is Liveness.OFFLINE and marker.reason == "stopped"
    assert pub.metrics.offline_markers == 1 and pub.metrics.batches_published == 3


async def test_mark_offline_pauses_heartbeats_until_a_batch_or_mark_online() -> None:
    """After ``mark_offline`` no heartbeat is appended; the next batch, or ``mark_online``,
    resumes them."""
    cache = FakeCache()
    log = MemoryLog()
    async with Publisher(cache, log, "w0", config=PublisherConfig(heartbeat_s=BEAT_S)) as pub:
        await wait_heartbeats(pub, 1)
        pub.mark_offline("engine unheard")
        pub.mark_offline("twice: nothing more")
        await pub.flush()
        beats = pub.metrics.heartbeats
        assert not pub.online
        await anyio.sleep(BEAT_S * 5)  # a pause in which heartbeats would have been due
        assert pub.metrics.heartbeats == beats
        pub.mark_online()
        await wait_heartbeats(pub, beats + 1)
        pub.mark_offline("again")
        cache.store(1)
        pub.step()
        assert pub.online
        await pub.flush()
        await wait_heartbeats(pub, pub.metrics.heartbeats + 1)
    kinds = [
        (seq, None if live is None else live.kind.value)
        for _, seq, live in await log_records(log)
        if live is None or live.kind is Liveness.OFFLINE or seq == 1
    ]
    assert kinds[:2] == [(0, None), (0, "offline")]
    assert (1, None) in kinds and (1, "heartbeat") in kinds
    assert pub.metrics.offline_markers == 2


def test_heartbeat_settings_are_checked() -> None:
    """A bad value names the field."""
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="heartbeat_s"):
            PublisherConfig(heartbeat_s=bad)
    with pytest.raises(ValueError, match="offline_on_close"):
        PublisherConfig(offline_on_close=1)  # type: ignore[arg-type]


async def test_a_tree_publishing_with_heartbeats_is_followed_without_a_gap() -> None:
    """The native recorder numbers the batches; heartbeats between bursts of steps name the
    last durable one, so the follower hears every one of them and never sees a gap."""
    alloc = SWAKVAllocator(4096, 4096, page_size=4, device="cpu")
    cache = SWARadixCache(alloc, sliding_window_size=8, page_size=4)
    log = MemoryLog()
    config = PublisherConfig(heartbeat_s=BEAT_S, offline_on_close=True)
    async with Publisher(cache, log, "tree", config=config) as pub:
        for burst in range(4):
            for request in range(20):
                tokens = [burst, request, *range(30)]
                value = alloc.alloc(len(tokens) // 4 * 4)
                assert value is not None
                cache.insert(tokens[: len(value)], value)
                pub.step()
                await anyio.lowlevel.checkpoint()
            await pub.flush()
            await wait_heartbeats(pub, pub.metrics.heartbeats + 1)
    views = StandardViews.create()
    follower = Follower(log, views.all)
    await follower.catch_up()
    metrics = follower.metrics
    assert metrics.gaps == 0 and metrics.divergences == 0 and metrics.undecodable == 0
    assert metrics.heartbeats_read == pub.metrics.heartbeats >= 4
    assert metrics.offline_markers_read == 1
    assert views.replicas["tree"].state_digest() == cache.state_digest()
    assert FollowerRouting(follower, views).sources()["tree"]["state"] == "offline"
