"""The sliding-window rule for a usable cached prefix (docs/design.md §3), as the native core
defines it once (``native/src/replica/swa_rule.rs``).

A cached path is a run of segments (tree nodes, or pages of a replica), each either resident
(its SWA KV kept) or a tombstone (SWA KV freed, full KV kept). A match may end after a segment
only if no tombstone precedes that point on the path, or at least ``sliding_window_size``
resident tokens follow the last tombstone before it. The tree's ``match_prefix`` and the
follower's replica store both answer with this one rule.
"""

from __future__ import annotations

from collections.abc import Iterable

from cache.events import _native


def usable_prefix(
    segments: Iterable[tuple[int, bool]], sliding_window_size: int
) -> tuple[int, int]:
    """(segments walked, how many leading segments form the longest SWA-usable prefix) of
    ``(tokens, resident)`` segments along a path, root first."""
    return _native.swa_usable_prefix(list(segments), sliding_window_size)
