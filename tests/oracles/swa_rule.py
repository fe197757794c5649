"""The pure-Python twin of the native SWA rule (``native/src/replica/swa_rule.rs``): a cached
prefix may end after a segment only if no tombstone precedes that point, or at least
``sliding_window_size`` resident tokens follow the last tombstone before it (docs/design.md §3).
Written as a plain walk over the segments, unlike the native rule's tombstone-fed form, so the
differential test compares two ways of saying it."""

from __future__ import annotations

import math
from collections.abc import Iterable


def usable_prefix(
    segments: Iterable[tuple[int, bool]], sliding_window_size: int
) -> tuple[int, int]:
    """(segments walked, how many leading segments form the longest SWA-usable prefix) of
    ``(tokens, resident)`` segments, root first."""
    since_tombstone: float = math.inf  # resident tokens since the last tombstone; inf: none yet
    walked = usable = 0
    for tokens, resident in segments:
        walked += 1
        since_tombstone = since_tombstone + tokens if resident else 0
        if since_tombstone >= sliding_window_size:
            usable = walked
    return walked, usable
