"""sglang's ``ZmqEventPublisher`` sends each run of SWA residency events as a batch of its own.

A batch that mixes them with sglang's own events is split, in order, into consecutive batches
(same ``ts`` and rank), so a consumer that rejects a batch holding an unknown event tag (sglang's
own typed decoder, Dynamo's) never loses a ``BlockStored``/``BlockRemoved``/``AllBlocksCleared``
to it. A batch without them is published unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from swa_es.integrations.sglang.wire import SWA_EVENT_TAGS


def split_runs(events: Sequence[Any]) -> list[list[Any]]:
    """``events`` cut where they switch between the SWA extension and sglang's own types."""
    runs: list[list[Any]] = []
    last: bool | None = None
    for event in events:
        extension = type(event).__name__ in SWA_EVENT_TAGS
        if extension is not last:
            runs.append([])
            last = extension
        runs[-1].append(event)
    return runs


def install(publisher_class: type[Any]) -> None:
    """Wrap ``publisher_class.publish`` (sglang's ``ZmqEventPublisher``) to split batches."""
    original: Callable[[Any, Any], None] = publisher_class.publish

    def publish(self: Any, events: Any) -> None:
        runs = split_runs(events.events)
        if len(runs) <= 1:
            original(self, events)
            return
        for run in runs:
            original(self, type(events)(ts=events.ts, events=run, attn_dp_rank=events.attn_dp_rank))

    publish.__doc__ = original.__doc__
    publisher_class.publish = publish
