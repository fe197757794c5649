"""The primary loop: run engine steps and publish each step's events, yielding between steps."""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from swa_es.engine.engine import Engine
from swa_es.publish.publisher import Publisher


@dataclass(slots=True)
class PrimaryProgress:
    """What one primary loop has done so far."""

    requests: int = 0
    steps: int = 0
    done: bool = False


async def run_primary(
    engine: Engine,
    publisher: Publisher,
    progress: PrimaryProgress,
    *,
    max_requests: int | None = None,
    rate_rps: float | None = None,
) -> None:
    """Step ``engine`` and publish until cancelled or ``max_requests`` are served, then flush.

    ``rate_rps`` paces requests (unpaced when ``None``); between steps the loop always yields so
    the publisher's append task and any follower in the same event loop keep up.
    """
    started = time.monotonic()
    while max_requests is None or progress.requests < max_requests:
        progress.requests += engine.step()
        progress.steps += 1
        publisher.step()
        if rate_rps is None:
            await anyio.lowlevel.checkpoint()
        else:
            due = started + progress.requests / rate_rps
            await anyio.sleep(max(0.0, due - time.monotonic()))
    await publisher.flush()
    progress.done = True
