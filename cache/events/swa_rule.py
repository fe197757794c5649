"""The sliding-window rule for a usable cached prefix, written once (docs/design.md §3).

A cached path is a run of segments (tree nodes, or pages of a replica), each either resident
(its SWA KV kept) or a tombstone (SWA KV freed, full KV kept). A match may end after a segment
only if no tombstone precedes that point on the path, or at least ``sliding_window_size``
resident tokens follow the last tombstone before it. The tree's ``match_prefix`` and the
follower's ``PrefixIndex`` both answer with this rule, so they agree by construction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def usable_prefix(
    segments: Iterable[tuple[int, bool]], sliding_window_size: int
) -> tuple[int, int]:
    """(segments walked, how many leading segments form the longest SWA-usable prefix).

    ``segments`` yields ``(tokens, resident)`` along the path, root first; it is consumed
    lazily, so a caller may stop the walk by ending the iterable.
    """
    since_tombstone: float = math.inf  # resident tokens since the last tombstone; inf: none yet
    walked = usable = 0
    for tokens, resident in segments:
        walked += 1
        since_tombstone = since_tombstone + tokens if resident else 0
        if since_tombstone >= sliding_window_size:
            usable = walked
    return walked, usable
