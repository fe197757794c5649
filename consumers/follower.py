"""The follower: reads a log of event batches and keeps its views in step with the primaries.

It decodes every record strictly into a ``WireBatch`` (held natively: header fields as
attributes, no Python object per event), admits batches through per-source cursors
(``consumers.cursor``, header fields only), applies admitted batches to every view (a view with
``apply_wire``, like ``ReplicaSet`` and ``Stats``, reads the record natively; any other view gets
the ``EventBatch``, its events made once per batch only then), checks in-band digests and
marks a source diverged whenever its stream cannot be trusted (gap, bad epoch start, digest
mismatch, an event naming an unknown block). Nothing it reads can crash it: undecodable
records are counted, logged with their position and skipped.

When every view declares its part in it (``consumers.views.view.LaneRole``: one ``ReplicaSet``,
views reading it such as ``PrefixIndex``, views counting what it applied such as ``Stats``) and
the log hands over records a poll at a time (``log.BatchReader``), the follower takes a fast
lane: one native call (``cache.events.replica_store.apply_records``) decodes and applies the
poll's records while each is the plain next batch of a trusted source (no meta, no digest, the
next seq of its epoch), and stops at the first record that is not; that record goes through the
path above, which stays the one that judges (gaps, epochs, digests, undecodable records), and
the lane resumes after it. The lane's cursors (``ReplayCursors``) mirror the trusted sources'
cursors.

Snapshots hold the views, the cursors, the log position and every source's digest together, so
a restarted follower loads the newest valid one and replays only the tail. They record the
log's identity too (``log.identity``): a snapshot of another log, or of this one before it was
wiped, is refused with a ``ForeignSnapshotError`` (``consumers.snapshots.provenance``).

When the log no longer holds the records the follower needs (retention deleted the start of a
partition that a fresh follower would replay, or the records after its snapshot's position),
it says so, reads from where the log now starts, and never guesses: every source whose history
fell in the deleted range is marked diverged with a reason naming the lost positions ("state
unknown"), until the source starts a new epoch. A log that can tell where it starts
(``KafkaLog.beginning``) makes this check; for others the cursors' checks stand alone.

Liveness records (heartbeats and offline markers, ``cache.events.liveness``) are told from
batches by their first bytes and go to the cursors alone (``Cursors.hear``): no view does any
work for them. ``liveness()`` says, per source, how long ago it was last heard on the
follower's own clock and whether it is offline: by its own marker, or unheard for
``source_timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from cache.events import (
    DEFAULT_MAX_RECORD_BYTES,
    DecodeError,
    EventBatch,
    WireBatch,
    decode_wire,
)
from cache.events.liveness import LIVENESS_PREFIX, Liveness, decode_liveness
from cache.events.replica_store import ReplayCursors, ReplicaConsistencyError, apply_records
from consumers.cursor import Clock, Cursors, Verdict
from consumers.errors import ConsumerError, SnapshotError, ViewStateError
from consumers.lag import LagClock
from consumers.metrics import FollowerMetrics
from consumers.progress import ADVANCE_EVERY_RECORDS, LoggedProgress, ReplayProgress
from consumers.snapshots import Snapshot, SnapshotInfo, SnapshotStorage, check_snapshot_of
from consumers.snapshots.pinning import pin_for_store
from consumers.views.replica import ReplicaSet
from consumers.views.view import DigestView, LaneCounter, LaneRole, View, WireView, lane_role
from log import (
    BatchReader,
    EventLog,
    KnowsItsBeginning,
    LogError,
    LogUnavailableError,
    Position,
    Record,
    StartAt,
    identity_of,
)

logger = logging.getLogger(__name__)

_RETENTION_RACES = 5


@dataclass(frozen=True, slots=True)
class SourceLiveness:
    """Whether a source is heard from: ``last_heard_s`` seconds ago (the follower's clock, from
    when it read the record); ``offline`` says why it is offline (None: it is not)."""

    last_heard_s: float
    offline: str | None


def _ranges_text(lost: dict[int, tuple[int, int]]) -> str:
    return ", ".join(
        f"partition {p} offsets {first}..{end - 1}" for p, (first, end) in sorted(lost.items())
    )


def _check_views(views: Sequence[View]) -> None:
    names = [view.name for view in views]
    if len(set(names)) != len(names):
        raise ValueError(f"view names must be unique, got {names}")
    for view in views:
        shared = getattr(view, "replicas", None)
        if isinstance(shared, ReplicaSet) and not any(shared is other for other in views):
            raise ValueError(
                f"view {view.name!r} reads a ReplicaSet that is not one of the follower's views"
            )


def _lane_views(views: Sequence[View]) -> tuple[ReplicaSet, list[LaneCounter]] | None:
    """The ``ReplicaSet`` the fast lane applies to and the views that count what it applied:
    when every view declares a lane role, exactly one of them the replicas' (``LaneRole``)."""
    roles = [lane_role(view) for view in views]
    if None in roles:
        return None
    targets = [v for v, role in zip(views, roles, strict=True) if role is LaneRole.REPLICAS]
    counters = [v for v, role in zip(views, roles, strict=True) if role is LaneRole.COUNTS]
    if len(targets) != 1 or not isinstance(target := targets[0], ReplicaSet):
        return None
    if not all(isinstance(view, LaneCounter) for view in counters):
        raise ValueError("a view of lane role COUNTS must have count_lane")
    return target, [view for view in counters if isinstance(view, LaneCounter)]


class Follower:
    """Replays a log into views; see the module docstring.

    ``snapshots=None``: no snapshots, and ``restore()`` replays from the beginning. Otherwise a
    snapshot is written every ``snapshot_every_batches`` applied batches or every
    ``snapshot_every_s`` seconds (when something was applied), keeping the store's ``keep``
    newest (``keep_snapshots`` overrides it); ``write_snapshots=False`` only reads the store
    (``restore`` loads from it, nothing is written to it and the log is not pinned).
    ``progress`` is told how a replay (``restore``, ``catch_up``) advances (default: log
    lines). ``on_applied`` is called with each applied batch (as its ``WireBatch``; for
    measurements). ``source_timeout_s``: a source unheard that long is offline (None: only its
    own offline marker makes it so); ``clock`` is the monotonic clock liveness is measured on.
    """

    def __init__(
        self,
        log: EventLog,
        views: Sequence[View],
        *,
        snapshots: SnapshotStorage | None = None,
        snapshot_every_batches: int = 1000,
        snapshot_every_s: float = 30.0,
        keep_snapshots: int | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        lag_refresh_s: float = 1.0,
        progress: ReplayProgress | None = None,
        on_applied: Callable[[WireBatch], None] | None = None,
        source_timeout_s: float | None = None,
        clock: Clock = time.monotonic,
        write_snapshots: bool = True,
    ) -> None:
        _check_views(views)
        if snapshot_every_batches < 1 or not snapshot_every_s > 0:
            raise ValueError("snapshot_every_batches and snapshot_every_s must be positive")
        if source_timeout_s is not None and not source_timeout_s > 0:
            raise ValueError(f"source_timeout_s must be positive, got {source_timeout_s!r}")
        if snapshots is not None and keep_snapshots is not None:
            snapshots.keep = keep_snapshots
        self.log = log
        self.views = list(views)
        self.store = snapshots
        self._write_snapshots = write_snapshots
        self.metrics = FollowerMetrics()
        self.source_timeout_s = source_timeout_s
        self._clock = clock
        self.cursors = Cursors(clock)
        self._digest_views = [v for v in self.views if isinstance(v, DigestView)]
        # per view: its apply_wire, or None when it takes the EventBatch
        self._appliers = [
            (view, view.apply_wire if isinstance(view, WireView) else None) for view in self.views
        ]
        self._snapshot_every_batches = snapshot_every_batches
        self._snapshot_every_s = snapshot_every_s
        self._max_record_bytes = max_record_bytes
        self._lag_refresh_s = lag_refresh_s
        self._lag = LagClock()
        self._progress: ReplayProgress = LoggedProgress() if progress is None else progress
        self._on_applied = on_applied
        self._offsets: dict[int, int] = {}
        self._batches_since_snapshot = 0
        self._last_snapshot_mono = time.monotonic()
        self._reading = False
        self._snapshot_lock = anyio.Lock()
        self._initial_views = {view.name: view.snapshot() for view in self.views}
        # the fast lane (see the module docstring): not with on_applied, which needs each batch
        lane = _lane_views(self.views) if on_applied is None else None
        self._lane_set: ReplicaSet | None = None if lane is None else lane[0]
        self._lane_counters: list[LaneCounter] = [] if lane is None else lane[1]
        self._lane = ReplayCursors()
        self.lost_history: dict[int, tuple[int, int]] = {}
        """Per partition, the ``[first, end)`` offsets this follower needed but the log had
        deleted (retention) when it started reading; empty when nothing was lost."""

    # --- state ----------------------------------------------------------------------------

    @property
    def position(self) -> Position:
        """Just after the last record read (what a snapshot taken now would cover)."""
        return Position.of(self._offsets)

    def diverged(self) -> dict[str, str]:
        """Diverged sources and why."""
        return self.cursors.diverged()

    def liveness(self) -> dict[str, SourceLiveness]:
        """Per source seen: how long ago it was last heard, and whether it is offline."""
        now, heard_at, offline = self.heard_and_offline()
        return {
            source: SourceLiveness(max(0.0, now - at), offline.get(source))
            for source, at in heard_at.items()
        }

    def heard_and_offline(self) -> tuple[float, dict[str, float], Mapping[str, str]]:
        """``liveness()`` as what the routing API reads per request, with no work per source
        in the common case: the clock now, when each source was last heard on it (a live view:
        read, never keep), and the offline sources with why."""
        now = self._clock()
        cursors = self.cursors
        heard_at, offline = cursors.heard_at(), cursors.marked_offline()
        timeout = self.source_timeout_s
        if timeout is not None and heard_at and now - min(heard_at.values()) > timeout:
            offline = {source: f"offline marker: {reason}" for source, reason in offline.items()}
            for source, at in heard_at.items():
                if now - at > timeout and source not in offline:
                    offline[source] = f"unheard for {now - at:.1f} s (source timeout {timeout:g} s)"
        elif offline:
            offline = {source: f"offline marker: {reason}" for source, reason in offline.items()}
        return now, heard_at, offline

    # --- one record -----------------------------------------------------------------------

    def _handle(self, record: Record) -> None:
        metrics = self.metrics
        metrics.records_read += 1
        self._offsets[record.partition] = record.offset + 1
        if record.payload.startswith(LIVENESS_PREFIX):
            self._hear(record)
            return
        try:
            batch = decode_wire(record.payload, max_record_bytes=self._max_record_bytes)
        except DecodeError as exc:
            metrics.undecodable += 1
            logger.warning(
                "skipping undecodable record at partition %d offset %d (key %r): %s",
                record.partition,
                record.offset,
                record.key,
                exc,
            )
            return
        admission = self.cursors.admit(batch)
        if admission.verdict is Verdict.APPLY:  # the common case, before the match
            self._apply(batch)
        else:
            self._skip(batch, admission.reason, admission.verdict)
        if self._lane_set is not None:
            self._sync_lane(batch.source)

    def _hear(self, record: Record) -> None:
        """A liveness record: to the cursors only, never the views."""
        metrics = self.metrics
        try:
            live = decode_liveness(record.payload)
        except DecodeError as exc:
            metrics.undecodable += 1
            logger.warning(
                "skipping undecodable liveness record at partition %d offset %d (key %r): %s",
                record.partition,
                record.offset,
                record.key,
                exc,
            )
            return
        admission = self.cursors.hear(live)
        match admission.verdict:
            case Verdict.APPLY:
                if live.kind is Liveness.HEARTBEAT:
                    metrics.heartbeats_read += 1
                else:
                    metrics.offline_markers_read += 1
                    logger.info("source %r marked itself offline: %s", live.source, live.reason)
            case Verdict.GAP:
                metrics.gaps += 1
                self._diverge(live.source, self._explained(live.source, admission.reason))
            case _:
                metrics.liveness_stale_skipped += 1
        if self._lane_set is not None and admission.verdict is Verdict.GAP:
            self._sync_lane(live.source)

    def _skip(self, batch: WireBatch, reason: str, verdict: Verdict) -> None:
        metrics = self.metrics
        match verdict:
            case Verdict.DUPLICATE:
                metrics.duplicates_skipped += 1
            case Verdict.STALE:
                metrics.stale_skipped += 1
            case Verdict.WHILE_DIVERGED:
                metrics.skipped_while_diverged += 1
            case Verdict.GAP:
                metrics.gaps += 1
                self._diverge(batch.source, self._explained(batch.source, reason))
            case Verdict.BAD_EPOCH_START:
                metrics.bad_epoch_starts += 1
                self._diverge(batch.source, self._explained(batch.source, reason))

    def _explained(self, source: str, reason: str) -> str:
        """``reason``, saying the source's state is unknown when the log lost records it needed
        (the cursor keeps the fuller reason)."""
        if not self.lost_history:
            return reason
        cursor = self.cursors.get(source)
        fuller = (
            f"state unknown: {reason}; the log no longer holds "
            f"{_ranges_text(self.lost_history)} (removed by retention)"
        )
        if cursor is not None and cursor.diverged == reason:
            cursor.diverged = fuller
        return fuller

    def _apply(self, batch: WireBatch) -> None:
        failure: ReplicaConsistencyError | None = None
        events: EventBatch | None = None
        for view, apply_wire in self._appliers:
            try:
                if apply_wire is not None:
                    apply_wire(batch)
                else:
                    if events is None:
                        events = batch.to_batch()
                    view.apply(events)
            except ReplicaConsistencyError as exc:
                failure = failure or exc
        self._count_applied(1, batch.event_count)
        if failure is not None:
            self._inconsistent(batch.source, failure.reason)
        elif (digest := batch.digest) is not None:
            self._check_digest(batch, digest)
        if batch.seq == 0:
            self.metrics.diverged_sources = len(self.cursors.diverged())
        if self._on_applied is not None:
            self._on_applied(batch)

    def _count_applied(self, batches: int, events: int) -> None:
        """The bookkeeping of ``batches`` applied batches (one by ``_apply`` or a run of the
        fast lane)."""
        metrics = self.metrics
        metrics.batches_applied += batches
        metrics.events_applied += events
        self._batches_since_snapshot += batches

    def _inconsistent(self, source: str, reason: str) -> None:
        """A batch of ``source`` did not fit its views: the source diverges."""
        self.metrics.inconsistent_batches += 1
        self._diverge(source, reason)

    def _check_digest(self, batch: WireBatch, expected: str) -> None:
        held = [view.source_digest(batch.source) for view in self._digest_views]
        known = [digest for digest in held if digest is not None]
        if not known:
            if held:  # no view can verify it (unknown digest algorithm): never a divergence
                self.metrics.digests_unverifiable += 1
            return
        self.metrics.digests_checked += 1
        if any(digest != expected for digest in known):
            self.metrics.digest_mismatches += 1
            self._diverge(
                batch.source,
                f"digest mismatch after seq {batch.seq} of epoch {batch.epoch}: "
                f"primary {expected}, replica {known[0]}",
            )

    def _diverge(self, source: str, reason: str) -> None:
        self.cursors.mark_diverged(source, reason)
        for view in self.views:
            view.mark_diverged(source, reason)
        self.metrics.divergences += 1
        self.metrics.diverged_sources = len(self.cursors.diverged())
        logger.warning("source %r diverged: %s", source, reason)

    # --- the fast lane ----------------------------------------------------------------------

    def _sync_lane(self, source: str) -> None:
        """Make the lane trust ``source`` exactly when its cursor is trusted."""
        cursor = self.cursors.get(source)
        if cursor is None or cursor.diverged is not None:
            self._lane.discard(source)
        else:
            self._lane.set(source, cursor.epoch, cursor.seq)

    def _reset_lane(self) -> None:
        self._lane.clear()
        for source in self.cursors.sources():
            self._sync_lane(source)

    def _run_lane(
        self, replicas: ReplicaSet, records: Sequence[Record], payloads: list[bytes], at: int
    ) -> int:
        """Apply ``records[at:]`` in the lane while it can; return how many it consumed. Each
        counts as ``_handle`` would count it (the last may have failed to fit its replica)."""
        limit = len(records) - at
        if self._writes_snapshots:  # stop exactly where a snapshot falls due, as _handle does
            limit = min(limit, max(1, self._snapshot_every_batches - self._batches_since_snapshot))
        consumed, pages, _, advanced, failure, churn = apply_records(
            replicas.store, payloads, at, limit, self._max_record_bytes, self._lane
        )
        if not consumed:
            return 0
        for counter in self._lane_counters:
            counter.count_lane(churn)
        last = records[at + consumed - 1]  # a poll's records are one partition's, in order
        self._offsets[last.partition] = last.offset + 1
        self.cursors.advance(advanced)
        self.metrics.records_read += consumed
        self._count_applied(consumed, pages)
        if failure is not None:
            source, reason = failure
            self._inconsistent(source, reason)
            self._sync_lane(source)
        return consumed

    # --- reading --------------------------------------------------------------------------

    def _snapshot_due(self) -> bool:
        if not self._writes_snapshots or self._batches_since_snapshot == 0:
            return False
        if self._batches_since_snapshot >= self._snapshot_every_batches:
            return True
        return time.monotonic() - self._last_snapshot_mono >= self._snapshot_every_s

    async def _read(self, *, follow: bool, progress: ReplayProgress | None) -> None:
        if self._reading:
            raise ConsumerError("this follower is already reading its log")
        self._reading = True
        try:
            for attempt in range(1, _RETENTION_RACES + 1):
                # no position yet: "beginning" is wherever retention left the log's start
                start: StartAt = self.position if self._offsets else "beginning"
                start = await self._past_lost_history(start)
                try:
                    await self._read_from(start, follow, progress)
                    return
                except LogError as exc:
                    # retention deleted what this read was about to fetch: look again
                    if attempt == _RETENTION_RACES or not await self._overtaken(start):
                        raise
                    logger.warning("retention overtook the read (%s); reading on", exc)
        finally:
            self._reading = False

    async def _read_from(
        self, start: StartAt, follow: bool, progress: ReplayProgress | None
    ) -> None:
        if self._lane_set is not None and isinstance(self.log, BatchReader):
            await self._read_in_lane(self._lane_set, self.log, start, follow, progress)
            return
        done = 0
        handle = self._handle
        async for record in self.log.read(start, follow=follow):
            handle(record)
            done += 1
            if progress is not None and done % ADVANCE_EVERY_RECORDS == 0:
                progress.advanced(done)
            if self.store is not None and self._snapshot_due():
                await self._scheduled_snapshot()

    async def _overtaken(self, start: StartAt) -> bool:
        """Whether the log now starts past where this follower stands, having read from
        ``start`` (retention deleted records since)."""
        if not isinstance(self.log, KnowsItsBeginning):
            return False
        stands = start.offsets if isinstance(start, Position) else {}
        stands.update(self._offsets)
        firsts = await self.log.beginning()
        return any(stands.get(p, 0) < first for p, first in firsts.offsets.items())

    async def _past_lost_history(self, start: StartAt) -> StartAt:
        """Where to read from when the log deleted records before ``start`` needs them: the
        log's beginning there; sources whose history fell in the gap are marked unknown."""
        if not isinstance(self.log, KnowsItsBeginning):
            return start
        firsts = await self.log.beginning()
        needed = start.offsets if isinstance(start, Position) else {}
        lost = {
            p: (needed.get(p, 0), first)
            for p, first in firsts.offsets.items()
            if needed.get(p, 0) < first
        }
        if not lost:
            return start
        for p, (first, end) in lost.items():
            earlier = self.lost_history.get(p)
            self.lost_history[p] = (first if earlier is None else min(first, earlier[0]), end)
        gone = _ranges_text(lost)
        logger.warning(
            "the log no longer holds %s (removed by retention); reading from where it starts "
            "now. Sources whose history fell there are marked unknown until their next epoch",
            gone,
        )
        for source in self.cursors.sources():
            cursor = self.cursors.get(source)
            if cursor is not None and cursor.diverged is None:
                self._diverge(
                    source,
                    f"state unknown: the log no longer holds {gone} (removed by retention), "
                    f"which may hold batches after seq {cursor.seq} of epoch {cursor.epoch}",
                )
        self._reset_lane()
        return Position.of({**needed, **{p: first for p, (_, first) in lost.items()}})

    async def _read_in_lane(
        self,
        replicas: ReplicaSet,
        log: BatchReader,
        start: StartAt,
        follow: bool,
        progress: ReplayProgress | None,
    ) -> None:
        """``_read`` through the fast lane: a poll's records at a time. A replay to the end
        (not following) keeps the prefix index's holder index out of step until it ends, then
        builds it once (``ReplicaSet.prefix_index_deferred``)."""
        done = 0
        self._reset_lane()
        with contextlib.nullcontext() if follow else replicas.prefix_index_deferred():
            async for records in log.read_batches(start, follow=follow):
                payloads = [record.payload for record in records]
                at, count = 0, len(records)
                while at < count:
                    took = self._run_lane(replicas, records, payloads, at)
                    if not took:  # this one needs the follower's judgement
                        self._handle(records[at])
                        took = 1
                    at += took
                    before, done = done, done + took
                    if progress is not None:
                        _advance(progress, before, done)
                    if self.store is not None and self._snapshot_due():
                        await self._scheduled_snapshot()

    def _lag_to(self, end: Position) -> int:
        return sum(max(0, end.get(p) - self._offsets.get(p, 0)) for p in end.partitions())

    def _observe_lag(self, end: Position) -> None:
        """Update ``metrics.lag_records`` and ``metrics.lag_s`` from the log's ``end`` seen
        now (``consumers.lag``)."""
        metrics = self.metrics
        metrics.lag_records, metrics.lag_s = self._lag.observe(self._clock(), end, self._offsets)

    async def refresh_lag(self) -> int:
        """Ask the log for its end and update ``metrics.lag_records`` and ``metrics.lag_s``;
        return the records behind."""
        self._observe_lag(await self.log.end())
        return self.metrics.lag_records

    async def catch_up(self, *, description: str = "catch-up") -> int:
        """Read up to the log's end taken now, apply it, and return the records read."""
        before = self.metrics.records_read
        end = await self.log.end()
        self._progress.started(description, self._lag_to(end))
        try:
            await self._read(follow=False, progress=self._progress)
        finally:
            self._progress.finished(self.metrics.records_read - before)
        self._observe_lag(end)
        return self.metrics.records_read - before

    async def _tick_forever(self) -> None:
        """While following: refresh the lag, and take a due snapshot even when the log is idle."""
        while True:
            await anyio.sleep(self._lag_refresh_s)
            try:
                await self.refresh_lag()
            except LogUnavailableError as exc:
                logger.warning("cannot read the log's end for the lag metric: %s", exc)
            if self._snapshot_due():
                await self._scheduled_snapshot()

    async def run(
        self, follow: bool = True, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Apply records as they arrive until cancelled (``follow=False``: ``catch_up``).

        Signals readiness once reading has started; a log error ends it loudly.
        """
        if not follow:
            task_status.started()
            await self.catch_up()
            return
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._tick_forever)
            task_status.started()
            await self._read(follow=True, progress=None)
            tasks.cancel_scope.cancel()

    # --- snapshots ------------------------------------------------------------------------

    def source_digests(self) -> dict[str, str | None]:
        """Every source's state digest as the views hold it (None: diverged or unknown)."""
        diverged = self.cursors.diverged()
        digests: dict[str, str | None] = {}
        for source in self.cursors.sources():
            held = [view.source_digest(source) for view in self._digest_views]
            known = [digest for digest in held if digest is not None]
            digests[source] = None if source in diverged or not known else known[0]
        return digests

    @property
    def _writes_snapshots(self) -> bool:
        """Whether this follower writes snapshots: it has a store and was not made read-only."""
        return self.store is not None and self._write_snapshots

    async def snapshot(self) -> SnapshotInfo:
        """Write a snapshot of every view, the cursors and the position now; pin the log."""
        if self.store is None:
            raise ConsumerError("this follower has no snapshot store")
        if not self._write_snapshots:
            raise ConsumerError("this follower only reads its snapshot store")
        async with self._snapshot_lock:
            views = {view.name: view.snapshot() for view in self.views}
            position, cursors = self.position, self.cursors.to_obj()
            self._batches_since_snapshot = 0
            self._last_snapshot_mono = time.monotonic()
            try:
                info = await self.store.write(
                    position,
                    cursors,
                    views,
                    self.source_digests(),
                    log_identity=await identity_of(self.log),
                )
                self.metrics.snapshots_written += 1
                self.metrics.last_snapshot_at = info.created_at
                await pin_for_store(self.log, self.store, await self.store.oldest_kept_position())
            except Exception:
                self.metrics.snapshot_failures += 1
                raise
        logger.info("wrote snapshot %s at position %s", info.name, info.position)
        return info

    async def _scheduled_snapshot(self) -> None:
        """A snapshot fallen due: one that cannot be written (a full disk, an unreachable
        snapshot topic) is counted (``snapshot_failures``) and logged, and the follower goes on
        following; the next is tried when due again (an explicit ``snapshot()`` raises)."""
        try:
            await self.snapshot()
        except (SnapshotError, LogError, OSError) as exc:
            logger.warning(
                "cannot write a snapshot (%d failed so far); following on, next try in %d "
                "batches or %g s: %s",
                self.metrics.snapshot_failures,
                self._snapshot_every_batches,
                self._snapshot_every_s,
                exc,
            )

    def _reset(self) -> None:
        for view in self.views:
            view.load(self._initial_views[view.name])
        self.cursors = Cursors(self._clock)
        self._offsets = {}
        self._reset_lane()

    def _load(self, snapshot: Snapshot) -> None:
        cursors = Cursors.from_obj(snapshot.cursors, self._clock)
        for view in self.views:
            view.load(snapshot.views[view.name])
        self.cursors = cursors
        self._reset_lane()
        self._offsets = snapshot.info.position.offsets
        for source, reason in cursors.diverged().items():
            for view in self.views:
                view.mark_diverged(source, reason)
        self.metrics.restored_generation = snapshot.info.generation
        self.metrics.last_snapshot_at = snapshot.info.created_at
        self.metrics.diverged_sources = len(cursors.diverged())

    async def _load_newest(self) -> SnapshotInfo | None:
        if self.store is None:
            return None
        names = [view.name for view in self.views]
        older_than: int | None = None
        while (found := await self.store.newest_valid(names, older_than=older_than)) is not None:
            # a snapshot of another log (or of this one before it was wiped) is refused
            await check_snapshot_of(self.log, self.store.url, found.info)
            try:
                self._load(found)
            except (ViewStateError, ValueError) as exc:
                logger.warning("skipping snapshot %s: %s", found.info.where, exc)
                self._reset()
                older_than = found.info.generation
                continue
            logger.info("restored snapshot %s (%s)", found.info.name, found.info.position)
            return found.info
        self._reset()
        return None

    async def restore(self) -> SnapshotInfo | None:
        """Load the newest valid snapshot (none: start over), then replay the tail.

        Returns the snapshot loaded, or None when the whole log was replayed.
        """
        info = await self._load_newest()
        await self.catch_up(description="restore")
        return info


def _advance(progress: ReplayProgress, before: int, done: int) -> None:
    """Tell ``progress`` of every multiple of ``ADVANCE_EVERY_RECORDS`` in ``(before, done]``."""
    step = ADVANCE_EVERY_RECORDS
    for mark in range((before // step + 1) * step, done + 1, step):
        progress.advanced(mark)
