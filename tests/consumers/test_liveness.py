"""Liveness on the follower's side: heartbeats and offline markers read from a real log, the
source timeout on the follower's own clock (a test clock here, so nothing waits on time), the
four states in the routing answers, and liveness records that are stale, out of order, ahead of
the cursor or malformed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cache.events import DecodeError
from cache.events.liveness import (
    LIVENESS_PREFIX,
    Liveness,
    LivenessRecord,
    decode_liveness,
    encode_liveness,
    heartbeat,
    is_liveness,
    offline,
)
from consumers import Follower, SnapshotStore
from log import MemoryLog
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews
from tests.consumers.primary_model import PrimaryModel, record

PROMPT = list(range(10, 26))
TIMEOUT_S = 30.0


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def live(record_: LivenessRecord) -> tuple[str, bytes]:
    """A (key, payload) pair for ``append``."""
    return record_.source, encode_liveness(record_)


class Fleet:
    """Two sources on one log, a follower with the standard views, its routing."""

    def __init__(self, *, degraded_lag_records: int | None = None) -> None:
        self.log = MemoryLog()
        self.clock = Clock()
        self.views = StandardViews.create()
        self.follower = Follower(
            self.log, self.views.all, source_timeout_s=TIMEOUT_S, clock=self.clock
        )
        self.routing = FollowerRouting(
            self.follower, self.views, degraded_lag_records=degraded_lag_records
        )
        self.a = PrimaryModel("a", page_size=4, sliding_window_size=4)
        self.b = PrimaryModel("b", page_size=4, sliding_window_size=4)

    async def start(self) -> None:
        """Both sources open an epoch and store the prompt; the follower reads it."""
        for model in (self.a, self.b):
            await self.append(record(model.start_epoch()))
            await self.append(record(model.batch(model.store(PROMPT))))
        await self.follower.catch_up()

    async def append(self, item: tuple[str, bytes]) -> None:
        await self.log.append(*item)

    async def read(self, *items: tuple[str, bytes]) -> None:
        for item in items:
            await self.append(item)
        await self.follower.catch_up()

    def answer(self, source: str) -> dict[str, object]:
        return self.routing.match(PROMPT, None)[source]

    def state(self, source: str) -> str:
        return str(self.routing.sources()[source]["state"])


async def test_heartbeats_keep_an_idle_source_exact_and_never_reach_the_views() -> None:
    """A source heard only through heartbeats stays exact past the timeout; the views apply
    nothing for them and ``last_heard_s`` restarts at each."""
    fleet = Fleet()
    await fleet.start()
    applied = fleet.follower.metrics.batches_applied
    stats = fleet.views.stats.get("a").as_dict()
    for _ in range(3):
        fleet.clock.now += TIMEOUT_S * 0.8
        await fleet.read(live(heartbeat("a", fleet.a.epoch, fleet.a.seq)))
    assert fleet.follower.metrics.heartbeats_read == 3
    assert fleet.follower.metrics.batches_applied == applied
    assert fleet.views.stats.get("a").as_dict() == stats
    assert fleet.answer("a") == {
        "cached_tokens": 16,
        "usable_tokens": 16,
        "state": "exact",
        "last_heard_s": 0.0,
        "tiers": {"GPU": {"cached_tokens": 16, "usable_tokens": 16}},
    }
    # b sent nothing all that time: offline by the timeout, answered with null lengths
    assert fleet.answer("b") == {
        "cached_tokens": None,
        "usable_tokens": None,
        "state": "offline",
        "last_heard_s": pytest.approx(TIMEOUT_S * 2.4),
        "tiers": {"GPU": {"cached_tokens": None, "usable_tokens": None}},
    }
    sources = fleet.routing.sources()
    assert sources["b"]["state"] == "offline" and "unheard for 72.0 s" in sources["b"]["offline"]
    assert sources["b"]["blocks"] == 4, "the replica is kept: a later batch may follow it"
    assert fleet.routing.source_states() == {"a": "exact", "b": "offline"}


async def test_an_offline_source_is_answered_whether_or_not_it_holds_the_prompt() -> None:
    """Offline sources appear in every match, also for a prompt nobody holds; a batch of the
    same epoch brings the source back."""
    fleet = Fleet()
    await fleet.start()
    fleet.clock.now += TIMEOUT_S + 1
    await fleet.read(live(heartbeat("a", fleet.a.epoch, fleet.a.seq)))
    miss = fleet.routing.match([999] * 8, None)
    assert miss == {
        "b": {
            "cached_tokens": None,
            "usable_tokens": None,
            "state": "offline",
            "last_heard_s": TIMEOUT_S + 1,
            "tiers": {"GPU": {"cached_tokens": None, "usable_tokens": None}},
        }
    }
    await fleet.read(record(fleet.b.batch(fleet.b.store([7] * 8))))
    assert fleet.state("b") == "exact" and fleet.answer("b")["cached_tokens"] == 16


async def test_an_offline_marker_holds_until_the_source_is_heard_again() -> None:
    """The marker makes the source offline at once; a later heartbeat (the engine is back)
    or batch of the same epoch, or a new epoch, ends it. The new epoch rebuilds the replica."""
    fleet = Fleet()
    await fleet.start()
    await fleet.read(live(offline("a", fleet.a.epoch, fleet.a.seq, "stopped")))
    assert fleet.follower.metrics.offline_markers_read == 1
    assert fleet.answer("a")["state"] == "offline"
    assert fleet.routing.sources()["a"]["offline"] == "offline marker: stopped"
    await fleet.read(live(heartbeat("a", fleet.a.epoch, fleet.a.seq)))
    assert fleet.answer("a")["state"] == "exact"
    await fleet.read(live(offline("a", fleet.a.epoch, fleet.a.seq, "engine unheard for 10 s")))
    assert fleet.answer("a")["state"] == "offline"
    # a restarted primary: a new epoch, with other blocks
    await fleet.read(record(fleet.a.start_epoch()), record(fleet.a.batch(fleet.a.store([5] * 8))))
    assert fleet.state("a") == "exact"
    assert "a" not in fleet.routing.match(PROMPT, None), "the old epoch's blocks are gone"
    assert fleet.routing.match([5] * 8, None)["a"]["cached_tokens"] == 8
    assert fleet.views.replicas["a"].state_digest() == fleet.a.digest.hexdigest()


async def test_stale_and_out_of_order_liveness_records_are_skipped() -> None:
    """A heartbeat or marker of an unknown or superseded epoch, or from before the cursor,
    changes nothing; one of an unknown source neither."""
    fleet = Fleet()
    await fleet.start()
    old_epoch = fleet.a.epoch
    await fleet.read(record(fleet.a.start_epoch()))  # a new epoch supersedes old_epoch
    await fleet.read(record(fleet.a.batch(fleet.a.store(PROMPT))))
    fleet.clock.now += TIMEOUT_S + 1
    await fleet.read(
        live(heartbeat("a", "not-an-epoch", fleet.a.seq)),
        live(heartbeat("a", old_epoch, 1)),
        live(heartbeat("a", fleet.a.epoch, 0)),  # written before the cursor's seq 1
        live(offline("a", old_epoch, 1, "an old run stopped")),
        live(heartbeat("nobody", "e", 0)),
    )
    metrics = fleet.follower.metrics
    assert metrics.liveness_stale_skipped == 5 and metrics.heartbeats_read == 0
    assert fleet.answer("a")["state"] == "offline", "still unheard: nothing stale counts"
    assert fleet.follower.diverged() == {}


async def test_a_liveness_record_past_the_cursor_is_a_gap() -> None:
    """A heartbeat naming a seq the follower never read says batches were lost: the source is
    unknown (alive, so not offline) until its next epoch."""
    fleet = Fleet()
    await fleet.start()
    await fleet.read(live(heartbeat("a", fleet.a.epoch, fleet.a.seq + 2)))
    assert fleet.follower.metrics.gaps == 1
    assert "seq gap" in fleet.follower.diverged()["a"]
    assert fleet.answer("a") == {
        "cached_tokens": None,
        "usable_tokens": None,
        "state": "unknown",
        "last_heard_s": 0.0,
        "tiers": {"GPU": {"cached_tokens": None, "usable_tokens": None}},
    }
    fleet.clock.now += TIMEOUT_S + 1
    assert fleet.answer("a")["state"] == "offline", "offline wins over unknown"


async def test_degraded_while_the_follower_lags() -> None:
    """Past the lag bound the known sources answer degraded (lengths kept); offline and
    unknown stay what they are."""
    fleet = Fleet(degraded_lag_records=5)
    await fleet.start()
    for _ in range(8):
        await fleet.append(record(fleet.b.batch(fleet.b.store([1, 2, 3, 4]))))
    await fleet.follower.refresh_lag()
    assert fleet.answer("a")["state"] == "degraded"
    assert fleet.answer("a")["cached_tokens"] == 16
    assert fleet.state("b") == "degraded"
    await fleet.follower.catch_up()
    await fleet.follower.refresh_lag()
    assert fleet.answer("a")["state"] == "exact"


async def test_every_match_form_carries_the_state() -> None:
    """Token ids and block hashes answer the same states."""
    fleet = Fleet()
    await fleet.start()
    await fleet.read(live(offline("b", fleet.b.epoch, fleet.b.seq, "stopped")))
    hashes = fleet.a.hashes(PROMPT)
    by_tokens = fleet.routing.match(PROMPT, None)
    assert fleet.routing.match_hashes(hashes, 4) == by_tokens
    assert by_tokens["b"]["state"] == "offline" and by_tokens["a"]["state"] == "exact"


async def test_the_offline_marker_survives_a_snapshot(tmp_path: Path) -> None:
    """A follower restored from a snapshot taken after the marker still answers offline; a
    source restored without one counts as heard at the restore."""
    fleet = Fleet()
    fleet.follower.store = SnapshotStore(tmp_path / "snap")
    await fleet.start()
    await fleet.read(live(offline("a", fleet.a.epoch, fleet.a.seq, "stopped")))
    await fleet.follower.snapshot()
    clock = Clock()
    clock.now = 5.0
    views = StandardViews.create()
    again = Follower(
        fleet.log,
        views.all,
        snapshots=SnapshotStore(tmp_path / "snap"),
        source_timeout_s=TIMEOUT_S,
        clock=clock,
    )
    assert await again.restore() is not None
    states = FollowerRouting(again, views).source_states()
    assert states == {"a": "offline", "b": "exact"}
    assert again.liveness()["b"].last_heard_s == 0.0


def test_liveness_records_round_trip_and_bad_ones_name_the_field() -> None:
    """Encoding is JSON with a prefix no batch has; decoding is strict."""
    beat = heartbeat("w0", "e1", 7)
    data = encode_liveness(beat)
    assert is_liveness(data) and data.startswith(LIVENESS_PREFIX)
    assert decode_liveness(data) == beat
    stop = offline("w0", "e1", 7, "x" * 5000)
    assert decode_liveness(encode_liveness(stop)).kind is Liveness.OFFLINE
    assert len(stop.reason or "") == 512
    for bad, field in (
        (b'{"live":"nap","source":"w","epoch":"e","seq":1}', "live"),
        (b'{"live":"heartbeat","source":"","epoch":"e","seq":1}', "source"),
        (b'{"live":"heartbeat","source":"w","epoch":7,"seq":1}', "epoch"),
        (b'{"live":"heartbeat","source":"w","epoch":"e","seq":-1}', "seq"),
        (b'{"live":"heartbeat","source":"w","epoch":"e","seq":true}', "seq"),
        (b'{"live":"heartbeat","source":"w","epoch":"e"}', "seq"),
        (b'{"live":"heartbeat","source":"w","epoch":"e","seq":1,"reason":"r"}', "reason"),
        (b'{"live":"offline","source":"w","epoch":"e","seq":1}', "reason"),
        (b'{"live":"offline","source":"w","epoch":"e","seq":1,"reason":"r","x":1}', "x"),
        (b'{"live":', ""),
        (b'{"v":2}', "live"),
    ):
        with pytest.raises(DecodeError) as caught:
            decode_liveness(bad)
        assert caught.value.field == field, bad


async def test_an_undecodable_liveness_record_is_counted_and_skipped() -> None:
    """Like any undecodable record: counted, logged, the source unaffected."""
    fleet = Fleet()
    await fleet.start()
    await fleet.read(("a", b'{"live":"heartbeat","source":"a"}'))
    assert fleet.follower.metrics.undecodable == 1
    assert fleet.answer("a")["state"] == "exact"
