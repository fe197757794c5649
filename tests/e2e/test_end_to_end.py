"""End to end: the chat workload drives real trees, publishers append to a real log, and a
follower's replicas and prefix index end equal to the primaries."""

from __future__ import annotations

from consumers import PrefixIndex, ReplicaSet
from log import EventLog
from swa_es import Publisher, PublisherConfig
from tests.e2e.conftest import LogFactory
from tests.e2e.harness import (
    Primary,
    drive,
    follow,
    full_match_tokens,
    make_workload,
    sample_prompts,
    swa_match_tokens,
)


async def _follow(log: EventLog) -> tuple[ReplicaSet, PrefixIndex]:
    replicas = ReplicaSet()
    index = PrefixIndex(replicas)
    await follow(log, replicas, index)
    return replicas, index


def _assert_index_agrees(
    index: PrefixIndex, primary: Primary, prompts: list[list[int]]
) -> tuple[int, int]:
    """PrefixIndex lengths equal the primary's own (full held, SWA-usable); returns how many
    prompts hit, and on how many of them the SWA rule cut the usable prefix short."""
    hits = cuts = 0
    for tokens in prompts:
        full = full_match_tokens(primary.cache, tokens)
        swa = swa_match_tokens(primary.cache, tokens)
        got = index.match(tokens).get(primary.source)
        if full == 0:
            assert got is None, f"{primary.source} holds nothing of this prompt"
            continue
        hits += 1
        cuts += swa < full
        assert got is not None and got.known
        assert (got.full_tokens, got.swa_tokens) == (full, swa)
    return hits, cuts


async def test_one_primary_replica_and_prefix_index_match(event_log: EventLog, device: str) -> None:
    """One primary under the chat workload: replica digest and prefix lengths equal the tree's."""
    primary = Primary.create("worker-0", device)
    workload = make_workload(seed=11)
    async with Publisher(
        primary.cache, event_log, primary.source, config=PublisherConfig(digest_every_batches=8)
    ) as pub:
        await drive([primary], [pub], workload, requests=150)
        await pub.flush()
    assert pub.metrics.overflows == 0 and pub.metrics.batches_published > 100
    replicas, index = await _follow(event_log)
    assert replicas[primary.source].state_digest() == primary.cache.state_digest()
    hits, cuts = _assert_index_agrees(index, primary, sample_prompts(primary, workload, 40))
    assert hits >= 10 and cuts >= 5, "the sample must hit, and hit tombstones the SWA rule cuts"
    assert replicas[primary.source].tombstone_count > 0


async def test_four_sources_interleaved_in_one_log(partitioned_log: EventLog, device: str) -> None:
    """Four workers publish into one log (3 partitions on Kafka); each replica equals its own
    primary and the prefix index answers for each."""
    event_log = partitioned_log
    primaries = [Primary.create(f"worker-{k}", device) for k in range(4)]
    workload = make_workload(seed=5)
    async with (
        Publisher(primaries[0].cache, event_log, primaries[0].source) as p0,
        Publisher(primaries[1].cache, event_log, primaries[1].source) as p1,
        Publisher(primaries[2].cache, event_log, primaries[2].source) as p2,
        Publisher(primaries[3].cache, event_log, primaries[3].source) as p3,
    ):
        await drive(primaries, [p0, p1, p2, p3], workload, requests=160)
    replicas, index = await _follow(event_log)
    if event_log.url.startswith("kafka"):
        partitions = {record.partition async for record in event_log.read()}
        assert len(partitions) > 1, "the sources must really interleave over partitions"
    assert sorted(replicas) == sorted(p.source for p in primaries)
    for primary in primaries:
        assert replicas[primary.source].state_digest() == primary.cache.state_digest()
        _assert_index_agrees(index, primary, sample_prompts(primary, workload, 10))


async def test_a_restarted_primary_opens_a_new_epoch(open_event_log: LogFactory) -> None:
    """A primary that restarts (fresh tree, log reopened) publishes a new epoch; the follower
    drops the old state and ends equal to the new tree, with nothing diverged."""
    workload = make_workload(seed=31)
    before = Primary.create("worker-0", "cpu")
    async with await open_event_log() as log, Publisher(before.cache, log, before.source) as pub:
        await drive([before], [pub], workload, requests=40)
    first_epoch = pub.epoch
    after = Primary.create("worker-0", "cpu")
    async with await open_event_log() as log:
        async with Publisher(after.cache, log, after.source) as pub:
            await drive([after], [pub], workload, requests=40)
        assert pub.epoch != first_epoch
        replicas = ReplicaSet()
        follower = await follow(log, replicas)
    assert before.cache.state_digest() != after.cache.state_digest()
    assert replicas[after.source].state_digest() == after.cache.state_digest()
    cursor = follower.cursors.get(after.source)
    assert cursor is not None and cursor.epoch == pub.epoch
