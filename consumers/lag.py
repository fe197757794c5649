"""How far a follower is behind its log's end, in records and in seconds.

The follower looks at the log's end about once a second while following (and when a replay
ends) and hands each look to ``LagClock.observe`` with its own position. Records behind: the
end minus the position, summed over partitions. Seconds behind: how long the log has held
records the follower has not applied, that is the age of the oldest such record, dated on the
follower's clock by the look at which it first lay before the end. Both are 0 when the follower
has reached the end it last saw, however long ago its last record was written; the seconds are
exact to within the time between two looks, and never depend on the writers' clocks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Final

from log import Position

MAX_LOOKS: Final = 4096
"""Looks kept while behind; past it the oldest but one is forgotten (the oldest, which dates the
lag, is kept), so a follower stuck for hours holds a bounded history."""


class LagClock:
    """The looks at the log's end the follower has not yet reached, each with when it was
    taken."""

    def __init__(self) -> None:
        self._ahead: deque[tuple[float, Position]] = deque()

    def observe(self, now: float, end: Position, position: Mapping[int, int]) -> tuple[int, float]:
        """Records and seconds behind, given the log's ``end`` seen at ``now`` and the
        follower's ``position`` (partition -> next offset) then."""
        behind = sum(max(0, end.get(p) - position.get(p, 0)) for p in end.partitions())
        ahead = self._ahead
        if behind == 0:
            ahead.clear()
            return 0, 0.0
        if not ahead or ahead[-1][1] != end:
            ahead.append((now, end))
            if len(ahead) > MAX_LOOKS:
                del ahead[1]
        while ahead and _reached(ahead[0][1], position):
            ahead.popleft()
        oldest = ahead[0][0] if ahead else now
        return behind, max(0.0, now - oldest)


def _reached(end: Position, position: Mapping[int, int]) -> bool:
    return all(position.get(p, 0) >= end.get(p) for p in end.partitions())
