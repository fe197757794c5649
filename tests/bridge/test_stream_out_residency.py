"""The stream out carrying SWA residency, read back by our own bridge: ``--zmq-tombstones groups``
(a vLLM hybrid model's two groups) and ``events`` (swa-es's sglang SWA events).

A follower of a log holding one source with tombstones and restores republishes it through a
``ZmqEgress``; a ``Bridge`` (the same one that reads vLLM's own hybrid groups and sglang with the
integration, proven against each engine's code in the differentials) reads that stream into a
second log; a second follower reads that. For sampled prompts, the second follower's cached and
SWA-usable lengths for the bridged source equal the first follower's for the original source.
The egress starts from the first follower's state (a run's opening batches carry its blocks and
tombstones) and the bridge, subscribing after the first messages went out, fills its gap from
the replay socket, so a replay that re-derives the run's state is checked as well. With the
``keep`` policy the same round trip loses the usable lengths (the self-test).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cache.events import BlockSWAEvicted, BlockSWARestored, Event, EventBatch, encode_batch
from consumers import Follower, PrefixMatch
from log import EventLog, open_log
from swa_es.bridge.ingest import Bridge
from swa_es.egress.bootstrap import follower_state, replica_lookup
from swa_es.egress.config import EgressConfig
from swa_es.egress.errors import EgressError
from swa_es.egress.stream import ZmqEgress
from swa_es.service.views import StandardViews
from tests.bridge.stream_out_workload import Workload

SOURCE = "w"
BRIDGED = "bridged"
CASES = [("vllm", "groups"), ("sglang", "events")]


def with_restores(workload: Workload, count: int, seed: int) -> Iterator[EventBatch]:
    """``count`` batches of ``workload``, more of them with a tombstone, some with a restore of
    a block tombstoned before (and still held)."""
    rng = random.Random(seed)
    tombstoned: set[int] = set()
    for _ in range(count):
        (batch,) = workload.batches(1)  # one at a time: ``workload.held`` is as of this batch
        events: list[Event] = list(batch.events)
        for event in batch.events:
            hashes = getattr(event, "block_hashes", ())
            if type(event).__name__ == "BlockSWAEvicted":
                tombstoned.update(hashes)
            elif type(event).__name__ == "BlockRemoved":
                tombstoned.difference_update(hashes)
        held = sorted(tombstoned & set(workload.held))
        roll = rng.random()
        if held and roll < 0.15:
            back = rng.choice(held)
            tombstoned.discard(back)
            events.append(BlockSWARestored((back,)))
        elif roll < 0.6 and len(workload.held) > len(tombstoned):
            resident = sorted(set(workload.held) - tombstoned)
            gone = rng.choice(resident)
            tombstoned.add(gone)
            events.append(BlockSWAEvicted((gone,)))
        yield EventBatch(
            batch.source, batch.epoch, batch.seq, batch.ts, tuple(events), meta=batch.meta
        )


async def append(log: EventLog, batches: list[EventBatch]) -> None:
    await log.append_batch([(batch.source, encode_batch(batch)) for batch in batches])


Lengths = tuple[int | None, int | None] | None
"""A source's (cached, usable) tokens for a prompt; None when it holds none of it."""


def lengths(found: PrefixMatch | None) -> Lengths:
    return None if found is None else (found.full_tokens, found.swa_tokens)


async def round_trip(
    tmp_path: Path, wire_format: str, tombstones: str
) -> list[tuple[int, Lengths, Lengths]]:
    """(prompt, first follower's lengths, second follower's lengths) for sampled prompts."""
    workload = Workload(SOURCE, seed=7)
    batches = list(with_restores(workload, 240, seed=11))
    pub, replay = f"ipc://{tmp_path}/out.pub", f"ipc://{tmp_path}/out.replay"
    async with (
        await open_log(f"file://{tmp_path}/a?fsync=never") as first_log,
        await open_log(f"file://{tmp_path}/b?fsync=never") as second_log,
    ):
        await append(first_log, batches[:120])  # before the run: its opening state
        first_views = StandardViews.create(keep_tokens=True)  # it runs the stream out
        first = Follower(first_log, first_views.all)
        await first.catch_up()
        config = EgressConfig(pub, replay, wire_format, tombstones)
        egress = ZmqEgress(
            first_log,
            config,
            deferred=True,
            lookup=replica_lookup(first_views.replicas),
            applied=lambda: first.position.get(0),
        )
        async with egress, anyio.create_task_group() as tasks:
            egress.begin(follower_state(first.position.get(0), first_views.replicas))
            tasks.start_soon(first.run)
            await anyio.sleep(0.2)  # the opening messages go out before the bridge subscribes
            async with Bridge(
                second_log,
                endpoint=pub,
                replay_endpoint=replay,
                source=BRIDGED,
                wire_format=wire_format,
                replay_timeout_s=5.0,
            ) as bridge:
                tasks.start_soon(bridge.run)
                await anyio.sleep(0.5)
                for at in range(120, len(batches), 20):
                    await append(first_log, batches[at : at + 20])
                    await anyio.sleep(0.05)
                end = (await first_log.end()).get(0)
                with anyio.fail_after(60):
                    while first.position.get(0) < end:  # noqa: ASYNC110 (no change event)
                        await anyio.sleep(0.01)
                expected = len(egress._state) + len(batches) - 120
                with anyio.fail_after(60):
                    while bridge.metrics.batches_applied < expected:
                        assert bridge.lost is None, bridge.lost
                        await anyio.sleep(0.01)
                publisher = bridge.publisher
                assert publisher is not None
                await publisher.flush(timeout_s=30)
                assert bridge.metrics.undecodable == 0, bridge.metrics
            tasks.cancel_scope.cancel()
        second_views = StandardViews.create()
        await Follower(second_log, second_views.all).catch_up()
        assert second_views.replicas[BRIDGED].diverged is None
        return [
            (
                len(prompt),
                lengths(first_views.prefix.match(prompt).get(SOURCE)),
                lengths(second_views.prefix.match(prompt).get(BRIDGED)),
            )
            for prompt in workload.samples(120)
        ]


@pytest.mark.parametrize(("wire_format", "tombstones"), CASES)
async def test_a_bridge_reads_back_the_usable_prefixes(
    tmp_path: Path, wire_format: str, tombstones: str
) -> None:
    answers = await round_trip(tmp_path, wire_format, tombstones)
    differ = [(n, ours, theirs) for n, ours, theirs in answers if ours != theirs]
    assert not differ, differ[:5]
    lowered = [
        ours
        for _, ours, _ in answers
        if ours and ours[0] is not None and ours[1] is not None and ours[1] < ours[0]
    ]
    assert lowered, "no sampled prompt had a usable prefix below its cached one"


async def test_the_keep_policy_loses_the_usable_prefixes(tmp_path: Path) -> None:
    """The self-test: without residency on the stream, the bridged source's usable lengths are
    unknown, so the comparison above would fail."""
    answers = await round_trip(tmp_path, "vllm", "keep")
    assert any(ours != theirs for _, ours, theirs in answers)
    assert all(theirs is None or theirs[1] is None for _, _, theirs in answers)


@pytest.mark.parametrize(("wire_format", "tombstones"), [("sglang", "groups"), ("vllm", "events")])
def test_a_policy_without_a_shape_in_the_format_is_refused(
    tmp_path: Path, wire_format: str, tombstones: str
) -> None:
    config = EgressConfig(f"ipc://{tmp_path}/x", None, wire_format, tombstones)
    with pytest.raises(EgressError, match=f"{tombstones}.*format only"):
        ZmqEgress(None, config)  # type: ignore[arg-type]
