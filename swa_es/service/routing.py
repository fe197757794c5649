"""The routing API's answers, read from a follower's views (``/v1/match``, ``/v1/sources``).

``state`` is ``"exact"`` when the follower holds the source's stream without a gap and
``"unknown"`` when it does not (diverged: a gap, an unknown epoch start, a digest mismatch);
unknown lengths are ``null``, never guessed. ``usable_tokens`` is also ``null`` for a source
whose stream carries no tombstones (an engine bridged from ZMQ: meta ``swa_events`` false).
"""

from __future__ import annotations

from typing import Any

from consumers import Follower
from swa_es.service.views import StandardViews


class FollowerRouting:
    """``RoutingBackend`` over one follower and its standard views."""

    def __init__(self, follower: Follower, views: StandardViews) -> None:
        self.follower = follower
        self.views = views

    def match(self, token_ids: list[int], extra_key: str | None) -> dict[str, dict[str, Any]]:
        """Per source holding part of the prompt (or unknown): cached and usable tokens."""
        answers: dict[str, dict[str, Any]] = {}
        for source, found in self.views.prefix.match(token_ids, extra_key).items():
            answers[source] = {
                "cached_tokens": found.full_tokens,
                "usable_tokens": found.swa_tokens,
                "state": "exact" if found.known else "unknown",
            }
        return answers

    def sources(self) -> dict[str, dict[str, Any]]:
        """Per source: epoch, seq, blocks, tombstones, lag and digest state."""
        lag_records = self.follower.metrics.lag_records
        answers: dict[str, dict[str, Any]] = {}
        for source in self.views.replicas.sources():
            tree = self.views.replicas[source]
            cursor = self.follower.cursors.get(source)
            meta = tree.meta
            answers[source] = {
                "epoch": None if cursor is None else cursor.epoch,
                "seq": None if cursor is None else cursor.seq,
                "state": "exact" if tree.diverged is None else "unknown",
                "diverged": tree.diverged,
                "blocks": len(tree),
                "tombstones": tree.tombstone_count,
                "swa_events": True if meta is None else meta.swa_events,
                "digest": tree.state_digest(),
                "digest_verifiable": meta is not None and meta.digest_verifiable,
                "lag_records": lag_records,
            }
        return answers
