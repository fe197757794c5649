"""What an engine seq means for the stream the bridge has applied so far.

Within one engine run seqs count up from 0 without holes. For a live message:

- nothing applied yet: ``FIRST`` (seq 0 starts cleanly; anything later needs a replay from 0);
- the next seq: ``NEXT``;
- further ahead: ``GAP`` (ask the replay socket for what is missing);
- a seq already applied with the same payload: ``DUPLICATE`` (a replay overlapped live
  messages that were queued meanwhile);
- a seq already applied with another payload, or one too old to compare: ``RESTART`` (the
  engine started over; a new epoch).
"""

from __future__ import annotations

import enum
import zlib
from collections import OrderedDict
from typing import Final

DEFAULT_REMEMBERED_SEQS: Final = 65_536


class Verdict(enum.Enum):
    """The meaning of one live message."""

    FIRST = "first"
    NEXT = "next"
    GAP = "gap"
    DUPLICATE = "duplicate"
    RESTART = "restart"


class StreamTracker:
    """The next expected seq of the current engine run, and checksums of recent payloads."""

    def __init__(self, remembered_seqs: int = DEFAULT_REMEMBERED_SEQS) -> None:
        if remembered_seqs < 1:
            raise ValueError(f"remembered_seqs: expected >= 1, got {remembered_seqs}")
        self._remembered = remembered_seqs
        self._checksums: OrderedDict[int, int] = OrderedDict()
        self.expected: int | None = None

    def classify(self, seq: int, payload: bytes) -> Verdict:
        """The verdict for a live message (nothing changes until ``accept``)."""
        if self.expected is None:
            return Verdict.FIRST
        if seq == self.expected:
            return Verdict.NEXT
        if seq > self.expected:
            return Verdict.GAP
        if self._checksums.get(seq) == zlib.crc32(payload):
            return Verdict.DUPLICATE
        return Verdict.RESTART

    def matches(self, seq: int, payload: bytes) -> bool:
        """Whether ``payload`` is the batch handled at ``seq`` (False when not remembered)."""
        return self._checksums.get(seq) == zlib.crc32(payload)

    def accept(self, seq: int, payload: bytes) -> None:
        """Record that ``seq`` was handled; the next expected seq follows it."""
        self.expected = seq + 1
        self._checksums[seq] = zlib.crc32(payload)
        while len(self._checksums) > self._remembered:
            self._checksums.popitem(last=False)

    def reset(self) -> None:
        """Forget the run (the engine restarted)."""
        self.expected = None
        self._checksums.clear()
