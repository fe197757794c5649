"""Interleaving property tests of the publisher share this: run a sequence of named operations
against a running ``Publisher`` over a ``SlowLog``, then check the log against the cache."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import anyio.lowlevel

from swa_es import Backpressure, Publisher
from swa_es.testing import SlowLog
from tests.swa_es.doubles import replay


async def run_ops(
    pub: Publisher,
    slow: SlowLog,
    ops: Sequence[str],
    overflow: str,
    cache_ops: Mapping[str, Callable[[], object]],
) -> None:
    """Run ``ops``: ``step`` (``Backpressure`` only under the ``block`` policy), ``yield`` (a
    checkpoint), ``hold`` and ``release`` (of ``slow``); any other name is one of ``cache_ops``.
    ``slow`` is released at the end."""
    for op in ops:
        if op == "step":
            try:
                pub.step()
            except Backpressure:
                assert overflow == "block"
        elif op == "yield":
            await anyio.lowlevel.checkpoint()
        elif op == "hold":
            slow.hold()
        elif op == "release":
            slow.release()
        else:
            cache_ops[op]()
    slow.release()


async def check_replays_to(slow: SlowLog, pub: Publisher, cache_digest: str) -> None:
    """A strict replay of the log ends at ``cache_digest``, and the closed publisher counted
    every batch it queued and left none behind."""
    state = (await replay(slow))[pub.source]
    assert state.digest.hexdigest() == cache_digest
    m = pub.metrics
    assert m.batches_queued == m.batches_published + m.discarded_batches
    assert m.queue_depth == 0 and not m.failed
