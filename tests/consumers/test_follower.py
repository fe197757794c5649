"""The follower over a real log: good streams, several sources, and crafted bad streams."""

from __future__ import annotations

import logging

import anyio
import orjson
import pytest

from cache.events import BatchMeta, BlockStored, EventBatch, WireBatch, encode_batch
from consumers import (
    Follower,
    PrefixIndex,
    PrefixMatch,
    ReplicaSet,
    Stats,
)
from consumers.progress import ADVANCE_EVERY_RECORDS
from log import EventLog
from tests.consumers.primary_model import PrimaryModel, record


def _views() -> tuple[ReplicaSet, PrefixIndex, Stats]:
    replicas = ReplicaSet()
    return replicas, PrefixIndex(replicas), Stats(replicas)


async def _append(log: EventLog, *batches: EventBatch) -> None:
    await log.append_batch([record(b) for b in batches])


async def _follow(log: EventLog) -> tuple[Follower, ReplicaSet, PrefixIndex]:
    replicas, index, stats = _views()
    follower = Follower(log, [replicas, index, stats])
    await follower.catch_up()
    return follower, replicas, index


async def _good_stream(log: EventLog, model: PrimaryModel, epoch: str = "e1") -> None:
    await _append(
        log,
        model.start_epoch(epoch),
        model.batch(model.store([1, 2, 3, 4])),
        model.batch(model.store([1, 2, 7]), with_digest=True),
    )


async def test_four_interleaved_sources_each_match_their_primary(event_log: EventLog) -> None:
    """Batches of 5 sources interleaved in one log rebuild 5 replicas equal to their models."""
    models = [PrimaryModel(f"worker-{i}", page_size=1 + i % 2) for i in range(5)]
    await _append(event_log, *(m.start_epoch() for m in models))
    for step in range(20):
        batches = []
        for i, model in enumerate(models):
            events = model.store([i, step, step + 1, 5, 6, 7])
            if step % 3 == 2:
                events += model.tombstone(model.hashes([i, step, step + 1, 5])[:1])
            batches.append(model.batch(events, with_digest=step % 4 == 0))
        await _append(event_log, *batches)
    follower, replicas, index = await _follow(event_log)
    for model in models:
        assert replicas[model.source].state_digest() == model.digest.hexdigest()
    assert follower.metrics.batches_applied == 5 * 21
    assert follower.metrics.digests_checked == 5 * 5
    assert follower.metrics.divergences == 0
    assert follower.diverged() == {}
    assert set(index.match([0, 19, 20, 5])) == {"worker-0"}


async def test_catch_up_reads_only_what_is_new(event_log: EventLog) -> None:
    """A second catch_up reads nothing; after more appends it reads exactly those."""
    model = PrimaryModel("w")
    await _good_stream(event_log, model)
    follower, replicas, _ = await _follow(event_log)
    assert await follower.catch_up() == 0
    await _append(event_log, model.batch(model.store([9, 9])))
    assert await follower.catch_up() == 1
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert follower.metrics.lag_records == 0


async def test_a_duplicate_batch_is_skipped_and_counted(event_log: EventLog) -> None:
    """The same (epoch, seq) twice is applied once."""
    model = PrimaryModel("w")
    first, second = model.start_epoch("e"), model.batch(model.store([1, 2]))
    await _append(event_log, first, second, second, model.batch(model.store([3])))
    follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.duplicates_skipped == 1
    assert follower.metrics.batches_applied == 3
    assert replicas["w"].state_digest() == model.digest.hexdigest()


async def test_a_seq_gap_diverges_the_source_until_a_new_epoch(event_log: EventLog) -> None:
    """A missing seq makes the source unknown everywhere; a fresh epoch heals it."""
    model, other = PrimaryModel("w"), PrimaryModel("other")
    await _append(event_log, model.start_epoch("e1"), other.start_epoch("o"))
    await _append(event_log, model.batch(model.store([1, 2])), other.batch(other.store([1, 2])))
    model.batch(model.store([3]))  # seq 2 is never written
    await _append(event_log, model.batch(model.store([4])), model.batch(model.store([5])))
    follower, replicas, index = await _follow(event_log)
    assert follower.metrics.gaps == 1
    assert follower.metrics.skipped_while_diverged == 1
    assert "seq gap" in follower.diverged()["w"]
    assert replicas["w"].state_digest() is None
    assert index.match([1, 2])["w"] == PrefixMatch.unknown()
    assert index.match([1, 2])["other"] == PrefixMatch(2, 2)
    assert replicas["other"].state_digest() == other.digest.hexdigest()
    await _good_stream(event_log, model, epoch="e2")
    await follower.catch_up()
    assert follower.diverged() == {}
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert index.match([1, 2, 3, 4])["w"] == PrefixMatch(4, 4)


async def test_a_stale_epoch_is_skipped_and_counted(event_log: EventLog) -> None:
    """Batches of an epoch that a newer one superseded are ignored."""
    old, new = PrimaryModel("w"), PrimaryModel("w")
    await _append(event_log, old.start_epoch("old"), old.batch(old.store([1, 2])))
    await _append(event_log, new.start_epoch("new"), new.batch(new.store([5, 6])))
    await _append(event_log, old.batch(old.store([3])), new.batch(new.store([5, 6, 7])))
    follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.stale_skipped == 1
    assert follower.diverged() == {}
    assert replicas["w"].state_digest() == new.digest.hexdigest()


async def test_a_new_epoch_without_all_blocks_cleared_diverges(event_log: EventLog) -> None:
    """An epoch that does not start with AllBlocksCleared at seq 0 is not trusted."""
    model = PrimaryModel("w")
    await _good_stream(event_log, model)
    model.epoch, model.seq = "e2", 0
    bad_start = EventBatch("w", "e2", 0, 0.0, tuple(model.store([8, 8])), None, model.meta())
    await _append(event_log, bad_start, model.batch(model.store([8, 8, 8])))
    follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.bad_epoch_starts == 1
    assert "without AllBlocksCleared" in follower.diverged()["w"]
    assert replicas["w"].state_digest() is None
    await _good_stream(event_log, model, epoch="e3")
    await follower.catch_up()
    assert replicas["w"].state_digest() == model.digest.hexdigest()


async def test_a_digest_mismatch_diverges_the_source(event_log: EventLog) -> None:
    """A batch whose in-band digest differs from the replica's marks the source diverged."""
    model = PrimaryModel("w")
    await _append(event_log, model.start_epoch("e"), model.batch(model.store([1])))
    lying = model.batch(model.store([2]), with_digest=True)
    lying = EventBatch(lying.source, lying.epoch, lying.seq, lying.ts, lying.events, "0" * 16)
    await _append(event_log, lying, model.batch(model.store([3])))
    follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.digest_mismatches == 1
    assert "digest mismatch" in follower.diverged()["w"]
    await _good_stream(event_log, model, epoch="e2")
    await follower.catch_up()
    assert follower.metrics.digests_checked == 2
    assert replicas["w"].state_digest() == model.digest.hexdigest()


@pytest.mark.parametrize("digest_alg", ["blake2b-v0", None])
async def test_a_digest_of_an_unknown_algorithm_is_unverifiable_not_divergent(
    event_log: EventLog, digest_alg: str | None
) -> None:
    """An epoch whose meta names another digest algorithm (or none, as records written before
    the algorithm was named) has its digests counted as unverifiable; the source stays healthy."""
    model = PrimaryModel("w")
    start = model.start_epoch("e")
    meta = BatchMeta(model.page_size, model.sliding_window_size, digest_alg=digest_alg)
    start = EventBatch(start.source, start.epoch, 0, start.ts, start.events, None, meta)
    foreign = model.batch(model.store([2]), with_digest=True)
    foreign = EventBatch("w", "e", foreign.seq, foreign.ts, foreign.events, "0" * 16)
    await _append(event_log, start, foreign)
    follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.digests_unverifiable == 1
    assert follower.metrics.digests_checked == follower.metrics.digest_mismatches == 0
    assert follower.diverged() == {}
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    await _good_stream(event_log, model, epoch="e2")
    await follower.catch_up()
    assert follower.metrics.digests_checked == 1 and follower.diverged() == {}


async def test_undecodable_records_are_counted_logged_and_skipped(
    event_log: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    """Garbage never crashes the follower; a lost batch of a source shows up as its gap."""
    model, other = PrimaryModel("w"), PrimaryModel("other")
    await _append(event_log, model.start_epoch("e"), other.start_epoch("o"))
    broken = orjson.loads(encode_batch(model.batch(model.store([1, 2]))))
    broken["seq"] = "two"
    await event_log.append_batch([("junk", b"\xff not json"), ("w", orjson.dumps(broken))])
    await _append(event_log, model.batch(model.store([3])), other.batch(other.store([1])))
    with caplog.at_level(logging.WARNING, logger="consumers.follower"):
        follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.undecodable == 2
    assert "undecodable record at partition" in caplog.text
    assert "seq: expected a non-negative int" in caplog.text
    assert follower.metrics.gaps == 1
    assert replicas["other"].state_digest() == other.digest.hexdigest()
    await _good_stream(event_log, model, epoch="e2")
    await follower.catch_up()
    assert replicas["w"].state_digest() == model.digest.hexdigest()


async def test_an_unknown_parent_hash_diverges_the_source(event_log: EventLog) -> None:
    """A BlockStored whose parent the replica never saw is inconsistent: the source diverges."""
    model = PrimaryModel("w")
    orphan = BlockStored((42,), 4242, (7,), 1)
    await _append(event_log, model.start_epoch("e"), model.batch([orphan]))
    await _append(event_log, model.batch(model.store([1])))
    follower, replicas, index = await _follow(event_log)
    assert follower.metrics.inconsistent_batches == 1
    assert follower.metrics.skipped_while_diverged == 1
    assert "unknown parent" in follower.diverged()["w"]
    assert index.match([1])["w"] == PrefixMatch.unknown()
    await _good_stream(event_log, model, epoch="e2")
    await follower.catch_up()
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert follower.metrics.divergences == 1


async def test_joining_an_epoch_midway_is_diverged_not_guessed(event_log: EventLog) -> None:
    """A source whose first batch in the log is not its epoch start is unknown."""
    model = PrimaryModel("w")
    model.start_epoch("e")
    await _append(event_log, model.batch(model.store([1])))
    follower, replicas, _ = await _follow(event_log)
    assert follower.metrics.bad_epoch_starts == 1
    assert replicas["w"].diverged is not None


async def test_run_applies_live_records(event_log: EventLog) -> None:
    """run(follow=True) keeps applying records appended after it started."""
    model = PrimaryModel("w")
    replicas = ReplicaSet()
    applied = anyio.Event()

    def note(batch: WireBatch) -> None:
        if batch.seq == 2:
            applied.set()

    follower = Follower(event_log, [replicas], lag_refresh_s=0.01, on_applied=note)
    async with anyio.create_task_group() as tasks:
        await tasks.start(follower.run)
        await _good_stream(event_log, model)
        with anyio.fail_after(10):
            await applied.wait()
        tasks.cancel_scope.cancel()
    assert replicas["w"].state_digest() == model.digest.hexdigest()


def test_views_must_be_uniquely_named_and_shared_replicas_present() -> None:
    """Two views with one name, or a view over a ReplicaSet not given, are refused."""
    replicas = ReplicaSet()
    log = object()
    with pytest.raises(ValueError, match="unique"):
        Follower(log, [replicas, ReplicaSet()])  # type: ignore[arg-type]  # never read
    with pytest.raises(ValueError, match="not one of"):
        Follower(log, [PrefixIndex(replicas)])  # type: ignore[arg-type]  # never read


class RecordedProgress:
    """A ``ReplayProgress`` that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def started(self, description: str, total_records: int) -> None:
        """Keep the call."""
        self.calls.append(("started", description, total_records))

    def advanced(self, done_records: int) -> None:
        """Keep the call."""
        self.calls.append(("advanced", done_records))

    def finished(self, done_records: int) -> None:
        """Keep the call."""
        self.calls.append(("finished", done_records))


async def test_a_replay_reports_its_progress_to_the_callback(event_log: EventLog) -> None:
    """restore() tells its progress the total, every ADVANCE_EVERY_RECORDS records, and the end."""
    model = PrimaryModel("w0")
    await _append(event_log, model.start_epoch("e1"))
    records = 2 * ADVANCE_EVERY_RECORDS + 5
    for step in range(records - 1):
        await _append(event_log, model.batch(model.store([step, step + 1])))
    progress = RecordedProgress()
    follower = Follower(event_log, [ReplicaSet()], progress=progress)
    await follower.restore()
    assert progress.calls == [
        ("started", "restore", records),
        ("advanced", ADVANCE_EVERY_RECORDS),
        ("advanced", 2 * ADVANCE_EVERY_RECORDS),
        ("finished", records),
    ]
