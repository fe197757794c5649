"""Property: whatever the interleaving of mutations, steps, holds and flushes, under either
overflow policy, a strict replay of the log ends equal to the cache and nothing is uncounted."""

from __future__ import annotations

import random

import anyio
import anyio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from log import MemoryLog
from swa_es import Publisher, PublisherConfig
from swa_es.testing import SlowLog
from tests.swa_es.doubles import FakeCache, random_mutation
from tests.swa_es.publisher_ops import check_replays_to, run_ops

OPS = st.lists(
    st.sampled_from(["mutate", "mutate", "step", "step", "yield", "hold", "release"]),
    max_size=120,
)


async def _run(ops: list[str], overflow: str, seed: int) -> None:
    rng = random.Random(seed)
    cache = FakeCache()
    slow = SlowLog(MemoryLog())
    next_hash = [1]
    async with Publisher(
        cache,
        slow,
        "w0",
        config=PublisherConfig(max_queue_batches=3, max_append_batch=2, overflow=overflow),
    ) as pub:
        await run_ops(
            pub, slow, ops, overflow, {"mutate": lambda: random_mutation(cache, rng, next_hash)}
        )
    await check_replays_to(slow, pub, cache.state_digest())
    m = pub.metrics
    assert m.overflows == m.resyncs + m.backpressure


@settings(max_examples=60, deadline=None)
@given(ops=OPS, overflow=st.sampled_from(["resync", "block"]), seed=st.integers(0, 1000))
def test_any_interleaving_replays_to_the_cache(ops: list[str], overflow: str, seed: int) -> None:
    """Random interleavings under both policies end with the replica equal to the cache."""
    anyio.run(_run, ops, overflow, seed)
