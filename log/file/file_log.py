"""``FileLog``: the embedded, single-partition log in a directory (see the package docstring)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import anyio
import anyio.to_thread

from log.base import records_of
from log.closing import ClosesOnExit
from log.errors import ConfigError, LogClosedError, LogWriteError
from log.file.config import (
    DEFAULT_BATCH_MAX_DELAY_S,
    DEFAULT_BATCH_MAX_RECORDS,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_SEGMENT_BYTES,
    FileLogConfig,
    FsyncPolicy,
)
from log.file.framing import MAX_KEY_BYTES
from log.file.group_commit import CommitLimits, GroupCommitter
from log.file.identity import ensure_identity, read_identity
from log.file.layout import check_for_reading, refuse_missing
from log.file.lock import writer_holds
from log.file.pins import Pin, PinStore
from log.file.reader import SegmentCursor, TornTail, scan_end, scan_tail
from log.file.recovery import RecoveredTail
from log.file.retention import RetentionPolicy, apply_retention
from log.file.startup import OpenedDirectory, open_for_writing
from log.file.watch import DirectoryWatch, open_watch
from log.file.writer import SegmentedWriter, WriteStats
from log.identity import LogIdentity
from log.position import Position, Record, StartAt

logger = logging.getLogger(__name__)

_UNBOUNDED = 2**62
_READ_BATCH_RECORDS = 1024
_FIRST_POLL_S = 0.0005
"""A polling readonly reader's first wait after records arrived (it doubles while none come)."""


def _commit_limits(config: FileLogConfig) -> CommitLimits:
    if config.fsync == "always":
        return CommitLimits(max_records=_UNBOUNDED, max_calls=1, linger_s=0.0)
    linger_s = config.batch_max_delay_s if config.fsync == "batch" else 0.0
    return CommitLimits(config.batch_max_records, _UNBOUNDED, linger_s)


class FileLog(ClosesOnExit):
    """A durable log in one directory: one writer (file lock), any number of readers.

    Open it with ``await FileLog.open(directory, ...)`` or ``await open_log("file:///dir")``.
    """

    def __init__(self, directory: Path, config: FileLogConfig, opened: OpenedDirectory | None):
        self.directory = directory
        self.config = config
        self.recovered_tail: RecoveredTail | None = opened.recovered_tail if opened else None
        """What open-time recovery cut from a torn tail (None: nothing)."""
        self.corrupt_offsets: list[int] = list(opened.corrupt_offsets) if opened else []
        """Damaged records recovery found (and kept) in the active segment."""
        self._pins = PinStore(directory)
        self._retention = RetentionPolicy(config.retention_bytes, config.retention_age_s)
        self._closed = False
        self._opened = opened
        self._identity: LogIdentity | None = None
        self._writer: SegmentedWriter | None = None
        self._committer: GroupCommitter | None = None
        if opened is not None:
            self._writer = SegmentedWriter(
                directory,
                opened.active,
                opened.index,
                segment_bytes=config.segment_bytes,
                sync_each_write=config.fsync != "never",
                sync_on_roll=config.fsync != "never",
                on_roll=self._retain_after_roll,
            )
            self._committer = GroupCommitter(
                opened.next_offset, self._writer.write, _commit_limits(config)
            )

    # ---- opening

    @classmethod
    async def open(
        cls,
        directory: str | Path,
        *,
        fsync: FsyncPolicy = "batch",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        batch_max_delay_s: float = DEFAULT_BATCH_MAX_DELAY_S,
        batch_max_records: int = DEFAULT_BATCH_MAX_RECORDS,
        retention_bytes: int | None = None,
        retention_age_s: float | None = None,
        readonly: bool = False,
        create: bool | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    ) -> FileLog:
        """Open the log in ``directory``; see the README for options. A writer creates a
        missing directory, a readonly reader only with ``create=True`` (else, like a directory
        holding something other than a log, it is a ``NotALogError``)."""
        config = FileLogConfig.from_options(
            dict(
                fsync=fsync,
                segment_bytes=segment_bytes,
                batch_max_delay_s=batch_max_delay_s,
                batch_max_records=batch_max_records,
                retention_bytes=retention_bytes,
                retention_age_s=retention_age_s,
                readonly=readonly,
                create=create,
                max_record_bytes=max_record_bytes,
                index_interval_bytes=index_interval_bytes,
                poll_interval_s=poll_interval_s,
            )
        )
        return await cls.open_config(Path(directory), config)

    @classmethod
    async def open_url(cls, netloc: str, path: str, options: Mapping[str, Any]) -> FileLog:
        """Open from the parts of a ``file://[localhost]/dir?opt=...`` URL."""
        if netloc not in ("", "localhost"):
            raise ConfigError("url", f"file:// URLs name a local directory, got host {netloc!r}")
        if not path or path == "/":
            raise ConfigError("path", "a file:// URL needs a directory path, e.g. file:///data/log")
        return await cls.open_config(Path(unquote(path)), FileLogConfig.from_options(options))

    @classmethod
    async def open_config(cls, directory: Path, config: FileLogConfig) -> FileLog:
        """Open with an already parsed configuration."""
        directory = await anyio.to_thread.run_sync(directory.absolute)
        if config.readonly:
            await anyio.to_thread.run_sync(
                functools.partial(check_for_reading, directory, create=config.creates)
            )
            return cls(directory, config, None)
        if not config.creates:
            await anyio.to_thread.run_sync(refuse_missing, directory)
        opened = await anyio.to_thread.run_sync(
            open_for_writing, directory, config.index_interval_bytes
        )
        log = cls(directory, config, opened)
        try:
            # under the writer lock: a new log (or one older than identities) gets its identity
            log._identity = await anyio.to_thread.run_sync(ensure_identity, directory)
            await log.apply_retention()
        except BaseException:
            await log.close()
            raise
        return log

    # ---- properties

    async def identity(self) -> LogIdentity | None:
        """This log's identity (``log.file.identity``): a writer's is written when it opens;
        a reader sees None until a writer has written one."""
        self._check_open()
        if self._identity is None:
            self._identity = await anyio.to_thread.run_sync(read_identity, self.directory)
        return self._identity

    @property
    def url(self) -> str:
        """``file:///dir?fsync=...`` (plus ``readonly=true`` for a reader)."""
        query = f"fsync={self.config.fsync}" + ("&readonly=true" if self.config.readonly else "")
        return f"file://{quote(str(self.directory))}?{query}"

    @property
    def readonly(self) -> bool:
        """Whether this log was opened for reading only."""
        return self._committer is None

    @property
    def stats(self) -> WriteStats:
        """Counters of the write path (records, bytes, writes, syncs, rolls)."""
        return self._writer.stats if self._writer is not None else WriteStats()

    @property
    def commits(self) -> int:
        """How many group commits (one write call each) completed."""
        return self._committer.commits if self._committer is not None else 0

    # ---- appending

    async def append(self, key: str, payload: bytes) -> Position:
        """Append one record; return its position once durable under the fsync policy.

        A full disk raises ``LogDiskFullError`` (retriable; nothing of the record stays) and the
        log takes appends again once space returns."""
        committer = self._writable()
        first = await committer.append([_encode_record(key, payload, self.config.max_record_bytes)])
        return Position(((0, first),))

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append records in order, in one commit; return each one's position once durable.

        On a full disk ``LogDiskFullError.records_written`` says how many of them (a prefix)
        reached the log before the write failed."""
        committer = self._writable()
        limit = self.config.max_record_bytes
        encoded = [_encode_record(key, payload, limit) for key, payload in records]
        if not encoded:
            return []
        first = await committer.append(encoded)
        return [Position(((0, first + i),)) for i in range(len(encoded))]

    def _writable(self) -> GroupCommitter:
        self._check_open()
        if self._committer is None:
            raise LogWriteError(f"{self.url} was opened readonly", retriable=False)
        return self._committer

    # ---- reading

    async def end(self) -> Position:
        """Where the next record will land (readers: the end of what is on disk now)."""
        self._check_open()
        if self._committer is not None:
            return Position(((0, self._committer.committed_end),))
        return Position(((0, await anyio.to_thread.run_sync(scan_end, self.directory)),))

    async def torn_tail(self) -> tuple[TornTail | None, bool | None]:
        """What lies past the last whole record at the end of the newest segment (None:
        nothing), and whether a writer holds the log now (None: cannot tell): while one does,
        such bytes are an append in progress; without one, a write a crash cut short, which
        the next writer's recovery cuts."""
        self._check_open()
        if self._committer is not None:
            return None, True
        tail = (await anyio.to_thread.run_sync(scan_tail, self.directory))[1]
        if tail is None:
            return None, None
        return tail, await anyio.to_thread.run_sync(writer_holds, self.directory)

    def read(self, start: StartAt = "beginning", *, follow: bool = False) -> AsyncIterator[Record]:
        """Records from ``start`` (inclusive) in order; without ``follow`` stop at the end taken
        when the read began, with it wait for more until cancelled or closed."""
        return records_of(self.read_batches(start, follow=follow))

    async def read_batches(
        self, start: StartAt = "beginning", *, follow: bool = False
    ) -> AsyncGenerator[list[Record], None]:
        """``read``, as the lists of records each read returned (of the segment files, or of
        the records this process committed last, which it keeps in memory)."""
        self._check_open()
        stop = None if follow else (await self.end()).get(0)
        first = await self._start_offset(start)
        cursor = SegmentCursor(self.directory, first)
        watch = open_watch(self.directory) if follow and self._committer is None else None
        tail = self._committer.tail if self._committer is not None else None
        if tail is not None:
            tail.readers += 1
        # The offset of the next record to hand over (None: not known before the first read),
        # and where the cursor stands, which lags it after records taken from the tail.
        next_offset = cursor_offset = first
        empty_polls = 0
        try:
            while True:
                limit = self._visible_end(stop)
                ahead = cursor.scanned_offset if next_offset is None else next_offset
                records: list[Record] = []
                # Nothing committed past the next record: wait for a commit without the thread
                # hop of a read that would come back empty.
                if limit is None or ahead < limit:
                    if tail is not None and next_offset is not None and limit is not None:
                        records = tail.take(next_offset, limit, _READ_BATCH_RECORDS)
                    if not records:
                        if cursor_offset != next_offset and next_offset is not None:
                            cursor.seek(next_offset)
                        records = await anyio.to_thread.run_sync(
                            cursor.read, limit, _READ_BATCH_RECORDS, tail is None
                        )
                        if records:
                            cursor_offset = records[-1].offset + 1
                    self._check_open()
                if records:
                    next_offset = records[-1].offset + 1
                    yield records
                    empty_polls = 0
                    continue
                if not follow:
                    return
                await self._wait_for_more(limit, empty_polls, watch)
                empty_polls += 1
        finally:
            if tail is not None:
                tail.readers -= 1
            cursor.close()
            if watch is not None:
                watch.close()

    async def _start_offset(self, start: StartAt) -> int | None:
        if start == "beginning":
            return None
        if start == "end":
            return (await self.end()).get(0)
        if isinstance(start, Position):
            return start.get(0)
        raise ConfigError("start", f"expected 'beginning', 'end' or a Position, got {start!r}")

    def _visible_end(self, stop: int | None) -> int | None:
        if self._committer is None:
            return stop
        end = self._committer.committed_end
        return end if stop is None else min(end, stop)

    async def _wait_for_more(
        self, seen_limit: int | None, empty_polls: int, watch: DirectoryWatch | None
    ) -> None:
        if self._committer is not None:
            if self._committer.committed_end == seen_limit:
                await self._committer.wait_committed()
        elif watch is not None:
            # A reader in another process than the writer wakes when the writer writes (or
            # creates a segment); it still looks every poll_interval_s, should no change be
            # reported. Draining before the next look lets a write after it wake us again.
            with anyio.move_on_after(self.config.poll_interval_s):
                await anyio.wait_readable(watch.fileno())
            watch.drain()
        else:
            # Without a watch it polls. Right after records arrived it looks again soon (a
            # writer that just wrote is likely to write again), then backs off, doubling the
            # wait up to poll_interval_s while nothing comes.
            backoff_s = _FIRST_POLL_S * 2 ** min(empty_polls, 30)
            await anyio.sleep(min(backoff_s, self.config.poll_interval_s))
        self._check_open()

    # ---- pins, retention, closing

    async def pin(
        self, name: str, position: Position | None, *, owner: Mapping[str, str] | None = None
    ) -> None:
        """Keep every record at or after ``position`` from retention under ``name`` (None
        unpins). Pins are files in the directory, so any process may pin; each file says whose
        it is (``owner`` adds to what the log records itself: command, pid, host, time)."""
        self._check_open()
        if position is not None and not isinstance(position, Position):
            raise ConfigError("position", f"expected a Position or None, got {position!r}")
        await anyio.to_thread.run_sync(self._pins.set, name, position, owner)

    async def pins(self) -> list[Pin]:
        """Every pin of this log with its owner; ``ValueError`` naming an unreadable one."""
        self._check_open()
        return await anyio.to_thread.run_sync(self._pins.pins)

    async def apply_retention(self) -> list[int]:
        """Delete the sealed segments retention lets go now; return their base offsets. Also
        runs on open and after every segment roll."""
        self._check_open()
        if self._committer is None:
            return []
        return await anyio.to_thread.run_sync(self._retain_blocking)

    def _retain_after_roll(self) -> None:
        try:
            self._retain_blocking()
        except OSError as exc:
            logger.warning("retention after a segment roll of %s failed: %s", self.directory, exc)

    def _retain_blocking(self) -> list[int]:
        if not self._retention.enabled:
            return []
        return apply_retention(
            self.directory, self._retention, self._pins.min_offset(), time.time()
        )

    async def close(self) -> None:
        """Finish pending appends, sync, release the writer lock; later calls raise
        ``LogClosedError`` and waiting followers wake with it."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._committer is not None:
                await self._committer.drain()
                self._committer.wake()
                await anyio.to_thread.run_sync(self._close_blocking)

    def _close_blocking(self) -> None:
        assert self._writer is not None and self._opened is not None and self._committer
        try:
            if self._committer.failure is None:
                self._writer.sync()
            self._writer.close()
        finally:
            self._opened.lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.url} is closed")


def _encode_record(key: str, payload: bytes, max_record_bytes: int) -> tuple[bytes, bytes]:
    if type(key) is not str:
        raise TypeError(f"key must be str, got {type(key).__name__}")
    if type(payload) is not bytes:
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    key_bytes = key.encode("utf-8")
    if len(key_bytes) > MAX_KEY_BYTES:
        raise LogWriteError(
            f"key of {len(key_bytes)} bytes exceeds {MAX_KEY_BYTES}", retriable=False
        )
    if len(key_bytes) + len(payload) > max_record_bytes:
        raise LogWriteError(
            f"record of {len(key_bytes) + len(payload)} bytes exceeds "
            f"max_record_bytes={max_record_bytes}",
            retriable=False,
        )
    return key_bytes, payload
