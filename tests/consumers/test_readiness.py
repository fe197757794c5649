"""Readiness (``consumers.readiness``): the judgement on given facts (restoring, replaying,
behind the log's end, the share of live sources caught up, offline sources left out), the replay
tracker it reads, and a real follower on a real log judged as it restores, falls behind, loses a
source's stream and stops hearing from it (a test clock, so nothing waits on time)."""

from __future__ import annotations

import pytest

from cache.events.liveness import encode_liveness, heartbeat
from consumers import Follower
from consumers.progress import ReplayProgress, ReplayState, ReplayTracker
from consumers.readiness import FollowerFacts, FollowerReadiness, ReadyBounds, judge
from log import MemoryLog
from swa_es.service.views import StandardViews
from tests.consumers.primary_model import PrimaryModel, record

TIMEOUT_S = 30.0


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def restored(**changes: object) -> FollowerFacts:
    """A restored follower at the log's end with three trusted live sources, but ``changes``."""
    facts: dict[str, object] = {
        "restored": True,
        "replay": ReplayState("restore", 4000, 4000, 2.0, False),
        "lag_records": 0,
        "lag_s": 0.0,
        "sources": ["a", "b", "c"],
    }
    facts.update(changes)
    return FollowerFacts(**facts)  # type: ignore[arg-type]


def test_restoring_counts_the_records_left_to_replay() -> None:
    """Before the replay begins: "restoring"; during it, the records to go, the rate so far and
    the time left at it."""
    bounds = ReadyBounds()
    before = judge(bounds, FollowerFacts(False, None, 0, 0.0, []))
    assert (before.ready, before.reason, before.to_go_records) == (False, "restoring", 0)
    replay = ReplayState("restore", 5000, 1000, 0.5, True)
    during = judge(bounds, FollowerFacts(False, replay, 0, 0.0, ["a"]))
    assert not during.ready
    assert during.reason == (
        "restoring: replaying the log, 4000 records to go, 2000 records/s, about 2.0 s to go"
    )
    assert (during.to_go_records, during.rate_records_s, during.eta_s) == (4000, 2000.0, 2.0)
    document = during.document()
    assert document["ready"] is False and document["records_to_go"] == 4000


def test_a_restored_follower_at_the_end_with_its_sources_trusted_is_ready() -> None:
    """Restored, at the log's end, every live source trusted: ready, 0 to go, the replay's rate."""
    readiness = judge(ReadyBounds(), restored())
    assert readiness.ready
    assert readiness.reason == "ready: 3 of 3 live sources caught up"
    assert (readiness.to_go_records, readiness.eta_s, readiness.rate_records_s) == (0, 0.0, 2000.0)
    assert readiness.document()["sources"] == {
        "live": 3,
        "caught_up": 3,
        "waiting": {},
        "offline": [],
    }


def test_behind_the_bound_in_records_or_seconds_is_not_ready() -> None:
    """Past ``lag_records`` (or ``lag_s`` when set) behind the log's end: not ready, with the
    lag and the time left; at the bound: ready."""
    bounds = ReadyBounds(lag_records=1000, lag_s=5.0)
    behind = judge(bounds, restored(lag_records=1001, lag_s=0.5))
    assert not behind.ready and behind.caught_up_sources == 0
    assert behind.reason.startswith(
        "catching up: 1001 records (0.5 s) behind the log's end, more than the bound of 1000 "
        "records and 5 s, 2000 records/s, about 0.5 s to go"
    ), behind.reason
    assert judge(bounds, restored(lag_records=1000, lag_s=5.0)).ready
    late = judge(bounds, restored(lag_records=10, lag_s=5.5))
    assert not late.ready and late.reason.startswith("catching up: 10 records (5.5 s)")
    assert judge(ReadyBounds(lag_records=0), restored(lag_records=1)).ready is False


def test_a_diverged_live_source_is_waited_for_up_to_the_share() -> None:
    """A live source whose stream is unknown is not caught up: at 95% one of three holds
    readiness back (named, with why); at a share of 0.5 it does not (named as not waited for)."""
    facts = restored(diverged={"b": "seq gap in epoch e1"})
    waiting = judge(ReadyBounds(), facts)
    assert not waiting.ready
    assert waiting.reason == "waiting for sources: b (2 of 3 live sources caught up, 3 needed)"
    assert waiting.waiting == {"b": "unknown: seq gap in epoch e1"}
    lenient = judge(ReadyBounds(sources_share=0.5), facts)
    assert lenient.ready
    assert lenient.reason == "ready: 2 of 3 live sources caught up; not waiting for b"


def test_an_offline_source_never_holds_readiness_back() -> None:
    """Offline sources (a marker, or unheard past the timeout) leave the denominator, diverged
    or not; with every source offline there is nothing to wait for."""
    facts = restored(offline={"b": "unheard for 31.0 s"}, diverged={"b": "seq gap"})
    readiness = judge(ReadyBounds(), facts)
    assert readiness.ready
    assert readiness.reason == "ready: 2 of 2 live sources caught up; offline: b"
    assert readiness.offline == ("b",) and readiness.live_sources == 2
    gone = {s: "offline marker: stopped" for s in ("a", "b", "c")}
    nobody = judge(ReadyBounds(), restored(offline=gone))
    assert nobody.ready
    assert nobody.reason == "ready: no live source to wait for; offline: a, b, c"


def test_the_share_is_of_live_sources_rounded_up() -> None:
    """95% of 20 live sources is 19: one unknown source is tolerated, two are not; the reason
    names at most five and counts the rest."""
    sources = [f"w{i:02d}" for i in range(20)]
    one = judge(ReadyBounds(), restored(sources=sources, diverged={"w03": "gap"}))
    assert one.ready and one.caught_up_sources == 19
    seven = {f"w{i:02d}": "gap" for i in range(7)}
    many = judge(ReadyBounds(), restored(sources=sources, diverged=seven))
    assert not many.ready
    assert many.reason.startswith("waiting for sources: w00, w01, w02, w03, w04 and 2 more (13")


@pytest.mark.parametrize(
    "bad", [{"lag_records": -1}, {"lag_s": -1.0}, {"sources_share": 0.0}, {"sources_share": 1.5}]
)
def test_bounds_out_of_range_are_refused(bad: dict[str, float]) -> None:
    """A negative bound or a share outside (0, 1] is an error naming the field."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        ReadyBounds(**bad)  # type: ignore[arg-type]


class Recorded:
    """A ``ReplayProgress`` that keeps the calls it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def started(self, description: str, total_records: int) -> None:
        self.calls.append(("started", (description, total_records)))

    def advanced(self, done_records: int) -> None:
        self.calls.append(("advanced", done_records))

    def finished(self, done_records: int) -> None:
        self.calls.append(("finished", done_records))


def test_the_tracker_remembers_the_replay_and_passes_every_call_on() -> None:
    """Nothing before a replay; while one runs its count and elapsed time; after it, its final
    count and duration (nothing to go); the inner progress gets each call."""
    clock, inner = Clock(), Recorded()
    tracker = ReplayTracker(inner, clock)
    progress: ReplayProgress = tracker
    assert tracker.state() is None
    progress.started("restore", 3000)
    clock.now += 1.0
    progress.advanced(1000)
    state = tracker.state()
    assert state == ReplayState("restore", 3000, 1000, 1.0, True)
    assert state.to_go_records == 2000 and state.eta_s() == 2.0
    assert state.text() == "restore: 1000/3000 records, 1000 records/s, about 2.0 s to go"
    progress.finished(3000)
    clock.now += 5.0
    ended = tracker.state()
    assert ended == ReplayState("restore", 3000, 3000, 1.0, False)
    assert ended.to_go_records == 0 and ended.rate_records_s == 3000.0
    assert inner.calls == [
        ("started", ("restore", 3000)),
        ("advanced", 1000),
        ("finished", 3000),
    ]


class Fleet:
    """Two sources on a real log; a follower with a test clock reporting to a tracker, judged
    with a bound of ``lag_records``."""

    def __init__(self, lag_records: int = 1000) -> None:
        self.log = MemoryLog()
        self.clock = Clock()
        self.views = StandardViews.create()
        self.tracker = ReplayTracker(clock=self.clock)
        self.follower = Follower(
            self.log,
            self.views.all,
            source_timeout_s=TIMEOUT_S,
            clock=self.clock,
            progress=self.tracker,
        )
        self.restored = False
        self.readiness = FollowerReadiness(
            self.follower, self.tracker, ReadyBounds(lag_records), lambda: self.restored
        )
        self.a = PrimaryModel("a", page_size=4)
        self.b = PrimaryModel("b", page_size=4)

    async def write(self, model: PrimaryModel, batches: int) -> None:
        """``batches`` batches of ``model`` (an epoch start first when it has none)."""
        if not model.epoch:
            await self.log.append(*record(model.start_epoch()))
        for i in range(batches):
            await self.log.append(*record(model.batch(model.store([i, i + 1, i + 2, i + 3]))))


async def test_a_follower_is_ready_once_restored_and_again_after_falling_behind() -> None:
    """Restoring: not ready; restored at the end: ready; records appended past the bound (seen
    at the next look at the log's end): not ready, catching up; read: ready again."""
    fleet = Fleet(lag_records=2)
    for model in (fleet.a, fleet.b):
        await fleet.write(model, 3)
    assert fleet.readiness.now().reason == "restoring"
    await fleet.follower.restore()
    assert fleet.readiness.now().reason.startswith("restoring")  # the service sets restored
    fleet.restored = True
    ready, document = fleet.readiness.check()
    assert ready and document["sources"]["live"] == 2, document
    await fleet.write(fleet.a, 3)
    await fleet.follower.refresh_lag()
    behind = fleet.readiness.now()
    assert not behind.ready and behind.reason.startswith("catching up: 3 records"), behind
    assert behind.to_go_records == 3
    await fleet.follower.catch_up()
    assert fleet.readiness.now().ready


async def test_a_source_with_a_gap_is_waited_for_until_it_goes_offline() -> None:
    """A heartbeat past b's last batch (batches lost): b is unknown and live, so the follower is
    not ready (b named); once b is unheard past the source timeout it is offline and left out:
    ready. A new epoch of b would rebuild it instead."""
    fleet = Fleet()
    for model in (fleet.a, fleet.b):
        await fleet.write(model, 2)
    await fleet.follower.restore()
    fleet.restored = True
    assert fleet.readiness.now().ready
    gap = heartbeat("b", fleet.b.epoch, fleet.b.seq + 5)
    await fleet.log.append("b", encode_liveness(gap))
    await fleet.follower.catch_up()
    waiting = fleet.readiness.now()
    assert not waiting.ready
    assert waiting.reason.startswith("waiting for sources: b (1 of 2 live sources caught up")
    assert waiting.waiting["b"].startswith("unknown: seq gap in epoch")
    fleet.clock.now += TIMEOUT_S / 2
    await fleet.log.append("a", encode_liveness(heartbeat("a", fleet.a.epoch, fleet.a.seq)))
    await fleet.follower.catch_up()
    assert not fleet.readiness.now().ready  # b still within its timeout
    fleet.clock.now += TIMEOUT_S / 2 + 1
    gone = fleet.readiness.now()
    assert gone.ready and gone.offline == ("b",), gone
    assert gone.reason == "ready: 1 of 1 live sources caught up; offline: b"
