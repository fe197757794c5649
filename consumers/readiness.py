"""Whether a follower is ready to be routed by: restored, and caught up for enough of its sources.

A follower reads one log in order, so it knows how far it is behind the log's end (records, and
seconds: ``consumers.lag``), not how the records it has still to read split among sources:
every source's unapplied records are at most the follower's lag, and that bound is what is
checked. A follower is *ready* when all of these hold (``judge``):

1. it is restored: the snapshot is loaded and the replay of the log's tail (to the end taken
   when the replay began) is done; until then the reason counts the records still to replay;
2. it is within ``ReadyBounds.lag_records`` records (and, when set, ``lag_s`` seconds) of the
   log's end, as of its last look at the end (about every second while following); this bounds
   every source's records not yet applied;
3. at least ``sources_share`` of its *live* sources are caught up: a live source is one it
   holds a cursor for that is not offline (no offline marker since it was last heard, and heard
   within the follower's source timeout), so a dead or silent source never holds readiness
   back; a live source is caught up when its stream is trusted (not diverged: the follower
   holds it without a gap, its state ``exact`` or ``degraded``), and not caught up while its
   state is unknown (a gap, a bad epoch start, a digest mismatch, history lost to retention)
   until its next epoch rebuilds it. With no live source at all there is nothing to wait for.

Readiness is judged afresh at each look: once ready, a follower that falls behind past the
bound, or whose live sources drop below the share, is not ready again until it recovers
(``/readyz`` turns 503 and back), like a source's ``degraded`` state. ``FollowerReadiness``
reads the facts off a follower and a ``ReplayTracker``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from consumers.progress import ReplayState, ReplayTracker

if TYPE_CHECKING:
    from consumers.follower import Follower

NAMED_SOURCES: Final = 5
"""Sources a reason names at most (then how many more)."""


@dataclass(frozen=True, slots=True)
class ReadyBounds:
    """How caught up a follower must be to be ready: within ``lag_records`` records of the
    log's end (and ``lag_s`` seconds, None: no bound in time), for at least ``sources_share`` of
    its live sources (0 < share <= 1)."""

    lag_records: int = 1000
    lag_s: float | None = None
    sources_share: float = 0.95

    def __post_init__(self) -> None:
        if self.lag_records < 0:
            raise ValueError(f"lag_records must be >= 0, got {self.lag_records!r}")
        if self.lag_s is not None and not self.lag_s >= 0:
            raise ValueError(f"lag_s must be >= 0, got {self.lag_s!r}")
        if not 0 < self.sources_share <= 1:
            raise ValueError(f"sources_share must be in (0, 1], got {self.sources_share!r}")

    def needed(self, live_sources: int) -> int:
        """Caught-up sources needed among ``live_sources``."""
        return math.ceil(self.sources_share * live_sources - 1e-9)


@dataclass(frozen=True, slots=True)
class FollowerFacts:
    """What readiness is judged on, at one moment: whether the follower is restored, its
    replay (None: none began), its lag behind the log's end, the sources it holds a cursor for,
    the offline ones (why) and the diverged ones (why)."""

    restored: bool
    replay: ReplayState | None
    lag_records: int
    lag_s: float
    sources: Sequence[str]
    offline: Mapping[str, str] = field(default_factory=dict)
    diverged: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Readiness:
    """A judgement: ``ready`` and why (``reason``), with the recovery's numbers: records to go
    (the replay's rest while restoring, then the lag), the rate of the last replay and the time
    left at it (None: unknown), the live sources, how many are caught up, the live ones waited
    for (why) and the offline ones left out."""

    ready: bool
    reason: str
    to_go_records: int
    rate_records_s: float | None
    eta_s: float | None
    live_sources: int = 0
    caught_up_sources: int = 0
    waiting: Mapping[str, str] = field(default_factory=dict)
    offline: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """The JSON document ``/readyz`` answers."""
        return {
            "ready": self.ready,
            "reason": self.reason,
            "records_to_go": self.to_go_records,
            "rate_records_per_s": self.rate_records_s,
            "eta_s": self.eta_s,
            "sources": {
                "live": self.live_sources,
                "caught_up": self.caught_up_sources,
                "waiting": dict(self.waiting),
                "offline": list(self.offline),
            },
        }


def _names(sources: Sequence[str]) -> str:
    shown = ", ".join(sources[:NAMED_SOURCES])
    more = len(sources) - NAMED_SOURCES
    return shown + (f" and {more} more" if more > 0 else "")


def _rate_text(rate: float | None, eta: float | None) -> str:
    if rate is None:
        return ""
    return f", {rate:.0f} records/s" + ("" if eta is None else f", about {eta:.1f} s to go")


def judge(bounds: ReadyBounds, facts: FollowerFacts) -> Readiness:
    """Whether a follower with ``facts`` is ready under ``bounds`` (see the module
    docstring); the reason names what it waits for."""
    replay = facts.replay
    rate = None if replay is None else replay.rate_records_s
    if not facts.restored:
        if replay is None or not replay.active:
            return Readiness(False, "restoring", 0, rate, None)
        to_go, eta = replay.to_go_records, replay.eta_s()
        reason = f"restoring: replaying the log, {to_go} records to go{_rate_text(rate, eta)}"
        return Readiness(False, reason, to_go, rate, eta)
    to_go = facts.lag_records
    eta = None if replay is None else replay.eta_s(to_go)
    if to_go == 0:
        eta = 0.0
    offline = tuple(sorted(s for s in facts.sources if s in facts.offline))
    live = [s for s in facts.sources if s not in facts.offline]
    waiting = {s: f"unknown: {facts.diverged[s]}" for s in sorted(live) if s in facts.diverged}
    numbers: dict[str, Any] = {"live_sources": len(live), "waiting": waiting, "offline": offline}
    over_time = bounds.lag_s is not None and facts.lag_s > bounds.lag_s
    if to_go > bounds.lag_records or over_time:
        bound = f"{bounds.lag_records} records" + (
            "" if bounds.lag_s is None else f" and {bounds.lag_s:g} s"
        )
        reason = (
            f"catching up: {to_go} records ({facts.lag_s:.1f} s) behind the log's end, more "
            f"than the bound of {bound}{_rate_text(rate, eta)}"
        )
        return Readiness(False, reason, to_go, rate, eta, **numbers)
    caught_up = len(live) - len(waiting)
    numbers["caught_up_sources"] = caught_up
    needed = bounds.needed(len(live))
    if caught_up < needed:
        reason = (
            f"waiting for sources: {_names(list(waiting))} ({caught_up} of {len(live)} live "
            f"sources caught up, {needed} needed)"
        )
        return Readiness(False, reason, to_go, rate, eta, **numbers)
    reason = f"ready: {caught_up} of {len(live)} live sources caught up"
    if not live:
        reason = "ready: no live source to wait for"
    if waiting:
        reason += f"; not waiting for {_names(list(waiting))}"
    if offline:
        reason += f"; offline: {_names(list(offline))}"
    return Readiness(True, reason, to_go, rate, eta, **numbers)


class FollowerReadiness:
    """A follower's readiness now, from the follower (its lag, liveness and divergences), the
    ``ReplayTracker`` it reports its replays to, and ``restored`` (whether its restore ended)."""

    def __init__(
        self,
        follower: Follower,
        tracker: ReplayTracker,
        bounds: ReadyBounds,
        restored: Callable[[], bool],
    ) -> None:
        self.follower = follower
        self.tracker = tracker
        self.bounds = bounds
        self._restored = restored

    def facts(self) -> FollowerFacts:
        """What readiness is judged on now."""
        follower = self.follower
        _, _, offline = follower.heard_and_offline()
        metrics = follower.metrics
        return FollowerFacts(
            restored=self._restored(),
            replay=self.tracker.state(),
            lag_records=metrics.lag_records,
            lag_s=metrics.lag_s,
            sources=follower.cursors.sources(),
            offline=offline,
            diverged=follower.diverged(),
        )

    def now(self) -> Readiness:
        """The judgement now."""
        return judge(self.bounds, self.facts())

    def check(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: ready, and the document answered."""
        readiness = self.now()
        return readiness.ready, readiness.document()
