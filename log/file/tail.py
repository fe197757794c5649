"""The records of the latest commits, kept in memory for readers in the writer's process.

A follower in the writer's process that has read everything committed would otherwise hand a
worker thread a read of the segment file for records this process committed moments before.
The committer adds each commit's records here when ``committed_end`` moves past them, that is
after their write and (under ``always``/``batch``) their fdatasync, so memory never shows a
reader anything the file would not. The tail holds one contiguous run of offsets ending at the
committed end, capped in records and bytes; a reader whose next offset lies inside it takes its
records from here. Everything else (a reader further behind, a readonly reader, another
process) reads the segment files, which stay the reference: a record from here equals the one a
file read returns (offset, key, payload, timestamp).
"""

from __future__ import annotations

from collections.abc import Sequence

from log.position import Record

DEFAULT_TAIL_RECORDS = 1024
DEFAULT_TAIL_BYTES = 1 << 20


class CommittedTail:
    """The last committed records (at most ``max_records`` of them and about ``max_bytes`` of
    keys and payloads), for in-process readers; commits keep none while no reader is
    registered (``readers``)."""

    def __init__(
        self,
        end: int,
        *,
        max_records: int = DEFAULT_TAIL_RECORDS,
        max_bytes: int = DEFAULT_TAIL_BYTES,
    ) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.readers = 0
        """In-process readers that may take records from here; with none, commits keep none."""
        self._records: list[Record] = []
        self._start = end
        self._bytes = 0

    @property
    def start(self) -> int:
        """The offset of the oldest record held (== ``end`` when empty)."""
        return self._start

    @property
    def end(self) -> int:
        """The offset after the newest record held: the committed end it last heard of."""
        return self._start + len(self._records)

    def reset(self, end: int) -> None:
        """Drop everything; the log now ends at ``end`` (a commit without records kept, a
        write cut back)."""
        self._records = []
        self._start = end
        self._bytes = 0

    def add(self, records: Sequence[Record]) -> None:
        """The records of one commit, in offset order, now durable; they follow ``end`` (else
        the tail starts over from them)."""
        if not records:
            return
        first = records[0].offset
        if first != self.end:
            self.reset(first)
        size = sum(len(r.key) + len(r.payload) for r in records)
        if len(records) > self.max_records or size > self.max_bytes:
            self.reset(first + len(records))
            return
        self._records += records
        self._bytes += size
        if len(self._records) > self.max_records or self._bytes > self.max_bytes:
            self._trim()

    def take(self, offset: int, limit: int, max_records: int) -> list[Record]:
        """Up to ``max_records`` records from ``offset`` on, below ``limit``; [] when ``offset``
        is not held (a file read finds them) or not below ``limit``."""
        at = offset - self._start
        if at < 0 or at >= len(self._records) or offset >= limit:
            return []
        return self._records[at : at + min(max_records, limit - offset)]

    def _trim(self) -> None:
        """Drop the oldest records down to half of each cap (so that trims stay rare)."""
        keep_records, keep_bytes = self.max_records // 2, self.max_bytes // 2
        records, size, cut = self._records, self._bytes, 0
        while cut < len(records) and (len(records) - cut > keep_records or size > keep_bytes):
            size -= len(records[cut].key) + len(records[cut].payload)
            cut += 1
        del records[:cut]
        self._start += cut
        self._bytes = size
