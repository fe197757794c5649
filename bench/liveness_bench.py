"""What liveness costs: the log's bytes per heartbeat, and the routing API's match with liveness.

- bytes: an idle publisher (no batch to publish) heartbeating into a FileLog (``fsync=never``);
  the growth of the log's segment files per heartbeat, and what that makes per idle source per
  hour at ``--heartbeat-s`` (a source that publishes more often than that writes none);
- match: ``FollowerRouting.match`` (native match, then per source the state and
  ``last_heard_s``) beside the native ``PrefixIndex.match`` alone, for ``--sources`` sources
  holding prefixes of one prompt; microseconds per call, the median of ``--repeats``::

    .venv/bin/python bench/liveness_bench.py [--heartbeat-s 5] [--sources 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
from pathlib import Path

import anyio

from consumers import Follower
from log import MemoryLog, open_log
from swa_es import Publisher, PublisherConfig
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews
from tests.consumers.primary_model import PrimaryModel, record
from tests.swa_es.doubles import FakeCache

BEATS = 200
PROMPT = list(range(1000, 1000 + 2048))


def _segment_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*.log"))


async def bytes_per_heartbeat() -> float:
    """Segment growth per heartbeat of an idle publisher."""
    with tempfile.TemporaryDirectory() as tmp:
        config = PublisherConfig(heartbeat_s=0.005)
        async with (
            await open_log(f"file://{tmp}/log?fsync=never") as log,
            Publisher(FakeCache(), log, "worker-0", config=config) as pub,
        ):
            while pub.metrics.heartbeats < 1:  # noqa: ASYNC110 -- a counter, not an event
                await anyio.sleep(0.001)
            before, beats = _segment_bytes(Path(tmp)), pub.metrics.heartbeats
            while pub.metrics.heartbeats < beats + BEATS:  # noqa: ASYNC110 -- a counter
                await anyio.sleep(0.001)
            after, done = _segment_bytes(Path(tmp)), pub.metrics.heartbeats
    return (after - before) / (done - beats)


async def match_costs(sources: int, repeats: int) -> tuple[float, float]:
    """Microseconds per ``FollowerRouting.match`` and per native ``PrefixIndex.match``."""
    log = MemoryLog()
    views = StandardViews.create()
    follower = Follower(log, views.all, source_timeout_s=15.0)
    routing = FollowerRouting(follower, views, degraded_lag_records=10_000)
    for index in range(sources):
        model = PrimaryModel(f"w{index}", page_size=16, sliding_window_size=64)
        await log.append(*record(model.start_epoch()))
        await log.append(*record(model.batch(model.store(PROMPT[: 128 * (index + 1)]))))
    await follower.catch_up()
    number = 2000

    def per_call(call: object) -> float:
        runs = [timeit.timeit(call, number=number) / number for _ in range(repeats)]  # type: ignore[arg-type]
        return statistics.median(runs) * 1e6

    return (
        per_call(lambda: routing.match(PROMPT, None)),
        per_call(lambda: views.prefix.match(PROMPT, None)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heartbeat-s", type=float, default=5.0)
    parser.add_argument("--sources", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    started = time.monotonic()
    per_beat = anyio.run(bytes_per_heartbeat)
    hourly = per_beat * 3600 / args.heartbeat_s / 1024
    print(
        f"heartbeat: {per_beat:.0f} bytes on a FileLog; {hourly:.0f} KiB per idle source per "
        f"hour at --heartbeat-s {args.heartbeat_s:g}"
    )
    routed, native = anyio.run(match_costs, args.sources, args.repeats)
    print(
        f"match, {args.sources} sources, {len(PROMPT)} tokens: {routed:.1f} us with states and "
        f"last_heard_s, {native:.1f} us native alone ({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
