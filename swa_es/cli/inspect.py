"""``swa-es inspect``: verify every record of a log and print its batches as JSON lines.

Each record is decoded strictly; its key must name the batch's source. A record that fails is
reported on stderr with its position and the scan goes on; a corrupt stretch of the log itself
(``LogDamageError``: a record that cannot be framed, a missing segment) ends the scan there,
after everything before it was printed, and fails it; with ``--skip-damage`` the scan reads on
from the next whole record and says how many records and bytes it skipped (still failing). A
torn tail (bytes of a record cut short at the very end of the log while no writer holds it) is
reported with its size and place and fails the scan too; while a writer holds the log, it is an
append in progress, noted only. A path that holds no log fails (an empty directory: no writer
has written there yet); a log without records is reported as an empty log.
Liveness records (heartbeats, offline markers: ``cache.events.liveness``) are checked the same
way and counted in the last line, not printed.

With ``--verify-snapshots STORE`` it verifies the snapshots of a store (a directory or a ``kafka://``
snapshot topic) instead: one JSON line per snapshot, oldest first, saying whether it loads
whole, whether it is a snapshot of this log (``consumers.snapshots.provenance``: one of another
log, or of this log before it was wiped, is not usable) and whether the log still holds every
record after its position (a snapshot older than what retention left cannot be caught up from).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import orjson

from cache.events import DecodeError, EventBatch, batch_to_dict, decode_batch
from cache.events.liveness import decode_liveness, is_liveness
from consumers import SnapshotInfo
from consumers.snapshots import foreign_snapshot
from consumers.snapshots.opening import directory_of, is_kafka_url
from log import EventLog, KnowsItsBeginning, Position, Record, StartAt, identity_of
from log.errors import CorruptRecordError, LogDamageError
from log.file import FileLog
from log.file.layout import DirectoryKind, classify
from log.file.reader import resume_after
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_FAILED, EXIT_OK
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import LogAccess
from swa_es.options import nested, option
from swa_es.options import values as v
from swa_es.service.log_access import open_reader, open_snapshots, redact


@dataclass(frozen=True, slots=True, kw_only=True)
class InspectConfig:
    """``swa-es inspect`` (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    snapshots: str | None = option(
        "verify-snapshots",
        v.snapshot_store,
        "list and verify the snapshots of this store (a directory or a kafka:// URL) instead "
        "of the log's records",
        default=None,
        metavar="STORE",
        shown_default="none",
    )
    start: Position | None = option(
        "from",
        v.position,
        "start position: N (partition 0) or P:N,P:N",
        default=None,
        metavar="POS",
        shown_default="the beginning",
    )
    source: str | None = option(
        "only-source",
        v.text_value,
        "print only this source's batches",
        default=None,
        metavar="ID",
        shown_default="every source",
        old_flags=("source",),
    )
    limit: int | None = option(
        "limit",
        v.positive_int,
        "print at most N batches",
        default=None,
        metavar="N",
        shown_default="no limit",
    )
    brief: bool = option("brief", v.boolean, "event counts instead of events", default=False)
    skip_damage: bool = option(
        "skip-damage",
        v.boolean,
        "read on past damage in the log from the next whole record, saying how much was "
        "skipped (the scan still fails)",
        default=False,
    )


COMMAND = Command("inspect", InspectConfig, positional=("log",))


def add_parser(subparsers: Any) -> None:
    """Add ``inspect`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="verify every record and print batches as JSON lines",
        description="Decode every record strictly; print each batch as one JSON line on "
        "stdout, problems on stderr; exit 1 if any record is bad, the log is damaged or has a "
        "torn tail, or the path holds no log.",
        run=run,
    )


def run(config: InspectConfig) -> int:
    """Run ``inspect`` on stdout/stderr; exit 1 when a record is bad."""

    async def main() -> int:
        if config.snapshots is not None:
            report = await inspect_snapshots(config, sys.stdout, sys.stderr)
        else:
            report = await inspect(config, sys.stdout, sys.stderr)
        return EXIT_OK if report.ok else EXIT_FAILED

    return anyio.run(main, backend="asyncio")


@dataclass(slots=True)
class InspectReport:
    """What a scan found."""

    records: int = 0
    printed: int = 0
    bad: int = 0
    liveness: int = 0
    corrupt_at: str | None = None
    skipped_records: int = 0
    skipped_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    """What else fails the scan (a torn tail, no log there), one line each."""

    @property
    def ok(self) -> bool:
        """Whether every record read was valid, the log whole and there."""
        return self.bad == 0 and self.corrupt_at is None and not self.problems


def describe(record: Record) -> str:
    """``partition P offset N`` of a record."""
    return f"partition {record.partition} offset {record.offset}"


def check_record(record: Record) -> EventBatch:
    """The record's batch; ``DecodeError`` when it is invalid or its key is not its source."""
    batch = decode_batch(record.payload)
    if record.key != batch.source:
        raise DecodeError("source", f"batch of {batch.source!r} under record key {record.key!r}")
    return batch


def check_liveness(record: Record) -> None:
    """``DecodeError`` when a liveness record is invalid or its key is not its source."""
    live = decode_liveness(record.payload)
    if record.key != live.source:
        raise DecodeError("source", f"liveness of {live.source!r} under record key {record.key!r}")


def batch_line(record: Record, batch: EventBatch, *, brief: bool) -> bytes:
    """The JSON line of one batch with its position (event counts by type when ``brief``)."""
    body: dict[str, Any] = {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        **batch_to_dict(batch),
    }
    if brief:
        body["events"] = dict(Counter(type(e).__name__ for e in batch.events))
    return orjson.dumps(body) + b"\n"


async def inspect(config: InspectConfig, out: TextIO, err: TextIO) -> InspectReport:
    """Scan the log of ``config``; write JSON lines to ``out`` and problems to ``err``."""
    report = InspectReport()
    log = await open_reader(config.log.url, config.log.open_timeout_s)
    what = "log"
    async with log:
        if isinstance(log, FileLog) and await _holds_nothing(log):
            report.problems.append(
                f"no log in {log.directory}: an empty directory (no writer has written there)"
            )
        elif await _scan(log, config, out, err, report):
            if isinstance(log, FileLog):
                await _check_tail(log, report)
            if report.records == 0 and report.ok:
                what = "an empty log (no records)"
    for problem in report.problems:
        err.write(f"{problem}\n")
    skipped = (
        f", {report.skipped_records} records ({report.skipped_bytes} bytes) skipped as damaged"
        if report.skipped_records
        else ""
    )
    verdict = "ok" if report.ok else "FAILED"
    err.write(
        f"inspect {redact(config.log.url)}: {what}: {report.records} records read, "
        f"{report.printed} batches printed, {report.bad} bad records, "
        f"{report.liveness} liveness records{skipped}: {verdict}\n"
    )
    return report


async def _holds_nothing(log: FileLog) -> bool:
    """Whether the directory of ``log`` is empty (a log no writer has written yet)."""
    kind, _ = await anyio.to_thread.run_sync(classify, log.directory)
    return kind is DirectoryKind.EMPTY


async def _scan(
    log: EventLog, config: InspectConfig, out: TextIO, err: TextIO, report: InspectReport
) -> bool:
    """Check and print the records; whether the scan reached the end of the log (it stops at
    ``--limit`` and at damage it does not skip)."""
    start: StartAt = config.start or "beginning"
    while True:
        try:
            async for record in log.read(start):
                if not _take(record, config, out, err, report):
                    return False
            return True
        except LogDamageError as exc:
            byte = (
                f" (byte {exc.byte_position})"
                if isinstance(exc, CorruptRecordError) and exc.byte_position is not None
                else ""
            )
            report.corrupt_at = f"segment {exc.segment} offset {exc.offset}{byte}"
            err.write(f"corrupt log at {report.corrupt_at}: {exc.reason}\n")
            resumed = await _resume(log, exc) if config.skip_damage else None
            if resumed is None:
                return False
            offset, skipped_bytes = resumed
            report.skipped_records += offset - exc.offset
            report.skipped_bytes += skipped_bytes or 0
            size = "" if skipped_bytes is None else f", {skipped_bytes} bytes of {exc.segment}"
            err.write(
                f"skipped offsets {exc.offset}..{offset - 1} "
                f"({offset - exc.offset} records{size}); reading on from offset {offset}\n"
            )
            start = Position.of({0: offset})


async def _resume(log: EventLog, damage: LogDamageError) -> tuple[int, int | None] | None:
    """Where a scan skipping ``damage`` reads on (``resume_after``); None: nowhere."""
    if not isinstance(log, FileLog):
        return None
    resumed = await anyio.to_thread.run_sync(resume_after, log.directory, damage)
    return resumed if resumed is not None and resumed[0] > damage.offset else None


def _take(
    record: Record, config: InspectConfig, out: TextIO, err: TextIO, report: InspectReport
) -> bool:
    """Check one record and print its batch; False once ``--limit`` batches are printed."""
    report.records += 1
    if is_liveness(record.payload):
        try:
            check_liveness(record)
            report.liveness += 1
        except DecodeError as exc:
            report.bad += 1
            err.write(f"bad record at {describe(record)}: {exc}\n")
        return True
    try:
        batch = check_record(record)
    except DecodeError as exc:
        report.bad += 1
        err.write(f"bad record at {describe(record)}: {exc}\n")
        return True
    if config.source is not None and batch.source != config.source:
        return True
    out.write(batch_line(record, batch, brief=config.brief).decode())
    report.printed += 1
    return config.limit is None or report.printed < config.limit


async def _check_tail(log: FileLog, report: InspectReport) -> None:
    """Fail on a torn tail (bytes of a record cut short at the end) no writer is appending."""
    tail, writer_live = await log.torn_tail()
    if tail is None or writer_live:
        return
    unsure = " (or an append in progress: whether a writer holds the log is unknown)"
    report.problems.append(
        f"torn tail: {tail.size_bytes} bytes at byte {tail.byte_position} of segment "
        f"{tail.segment} (where offset {tail.offset} would start) are not a whole record and "
        "were not read: a write cut short (a crash), which the next writer's recovery cuts"
        + (unsure if writer_live is None else "")
    )


async def _log_beginning(log: EventLog) -> Position | None:
    """Where the log starts now, when it can tell (Kafka); None otherwise."""
    return await log.beginning() if isinstance(log, KnowsItsBeginning) else None


def snapshot_line(info: SnapshotInfo, error: str | None, beginning: Position | None) -> bytes:
    """The JSON line of one snapshot: what it covers, and whether it is usable."""
    gone = (
        None
        if beginning is None
        else {p: first for p, first in beginning.offsets.items() if info.position.get(p) < first}
    )
    body: dict[str, Any] = {
        "snapshot": info.where,
        "generation": info.generation,
        "created_at": info.created_at,
        "position": info.position.offsets,
        "size_bytes": info.size_bytes,
        "digests": info.digests,
        "log_id": None if info.log_identity is None else info.log_identity.log_id,
        "valid": error is None,
        "error": error,
        "log_holds_tail": None if gone is None else not gone,
        "log_starts_at": gone or None,
    }
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def store_path_problem(url: str) -> str | None:
    """What is wrong with a directory store's path (missing, not a directory, a log
    directory), naming it; None when it may be a store (blocking)."""
    if is_kafka_url(url):
        return None
    path = directory_of(url)
    kind, _ = classify(path)
    if kind is DirectoryKind.MISSING:
        return f"no snapshot store at {path} (no such directory)"
    if kind is DirectoryKind.NOT_A_DIRECTORY:
        return f"no snapshot store at {path} (not a directory)"
    if kind is DirectoryKind.LOG:
        return f"no snapshot store at {path} (a log directory)"
    return None


async def inspect_snapshots(config: InspectConfig, out: TextIO, err: TextIO) -> InspectReport:
    """Verify every snapshot of ``config.snapshots`` whole; one JSON line each on ``out``."""
    assert config.snapshots is not None
    report = InspectReport()
    problem = await anyio.to_thread.run_sync(store_path_problem, config.snapshots)
    if problem is not None:
        err.write(f"inspect {redact(config.snapshots)}: {problem}: FAILED\n")
        report.problems.append(problem)
        return report
    log = await open_reader(config.log.url, config.log.open_timeout_s)
    async with log:
        beginning = await _log_beginning(log)
        identity, end = await identity_of(log), await log.end()
        store = await open_snapshots(config.snapshots, config.log.open_timeout_s)
        try:
            for info in await store.infos():
                report.records += 1
                loaded = await store.newest_valid(older_than=info.generation + 1)
                error = None
                if loaded is None or loaded.info.generation != info.generation:
                    error = "does not load whole (see the warning above)"
                elif refusal := foreign_snapshot(store.url, info, log.url, identity, end):
                    error = f"not a snapshot of this log: {refusal.reason}"
                if error is not None:
                    report.bad += 1
                out.write(snapshot_line(info, error, beginning).decode())
                report.printed += 1
        finally:
            await store.close()
    if report.records == 0:
        report.problems.append(f"no snapshots in {redact(config.snapshots)}")
    for problem in report.problems:
        err.write(f"{problem}\n")
    verdict = "ok" if report.ok else "FAILED"
    err.write(
        f"inspect {redact(config.snapshots)}: {report.records} snapshots, "
        f"{report.bad} that do not load: {verdict}\n"
    )
    return report
