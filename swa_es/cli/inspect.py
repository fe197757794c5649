"""``swa-es inspect``: verify every record of a log and print its batches as JSON lines.

Each record is decoded strictly; its key must name the batch's source. A record that fails is
reported on stderr with its position and the scan goes on; a corrupt stretch of the log itself
(``CorruptRecordError``) ends the scan there, after everything before it was printed.
Liveness records (heartbeats, offline markers: ``cache.events.liveness``) are checked the same
way and counted in the last line, not printed.

With ``--verify-snapshots STORE`` it verifies the snapshots of a store (a directory or a ``kafka://``
snapshot topic) instead: one JSON line per snapshot, oldest first, saying whether it loads
whole and whether the log still holds every record after its position (a snapshot older than
what retention left cannot be caught up from).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import orjson

from cache.events import DecodeError, EventBatch, batch_to_dict, decode_batch
from cache.events.liveness import decode_liveness, is_liveness
from consumers import SnapshotInfo
from log import CorruptRecordError, EventLog, KnowsItsBeginning, Position, Record
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
        "source",
        v.text_value,
        "print only this source's batches",
        default=None,
        metavar="ID",
        shown_default="every source",
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


COMMAND = Command("inspect", InspectConfig, positional=("log",))


def add_parser(subparsers: Any) -> None:
    """Add ``inspect`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="verify every record and print batches as JSON lines",
        description="Decode every record strictly; print each batch as one JSON line on "
        "stdout, problems on stderr; exit 1 if any record is bad.",
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

    @property
    def ok(self) -> bool:
        """Whether every record read was valid."""
        return self.bad == 0 and self.corrupt_at is None


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
    async with log:
        try:
            async for record in log.read(config.start or "beginning"):
                report.records += 1
                if is_liveness(record.payload):
                    try:
                        check_liveness(record)
                        report.liveness += 1
                    except DecodeError as exc:
                        report.bad += 1
                        err.write(f"bad record at {describe(record)}: {exc}\n")
                    continue
                try:
                    batch = check_record(record)
                except DecodeError as exc:
                    report.bad += 1
                    err.write(f"bad record at {describe(record)}: {exc}\n")
                    continue
                if config.source is not None and batch.source != config.source:
                    continue
                out.write(batch_line(record, batch, brief=config.brief).decode())
                report.printed += 1
                if config.limit is not None and report.printed >= config.limit:
                    break
        except CorruptRecordError as exc:
            report.corrupt_at = f"segment {exc.segment} offset {exc.offset}"
            err.write(f"corrupt log at {report.corrupt_at}: {exc.reason}\n")
    verdict = "ok" if report.ok else "FAILED"
    err.write(
        f"inspect {redact(config.log.url)}: {report.records} records read, "
        f"{report.printed} batches printed, {report.bad} bad records, "
        f"{report.liveness} liveness records: {verdict}\n"
    )
    return report


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
        "valid": error is None,
        "error": error,
        "log_holds_tail": None if gone is None else not gone,
        "log_starts_at": gone or None,
    }
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS) + b"\n"


async def inspect_snapshots(config: InspectConfig, out: TextIO, err: TextIO) -> InspectReport:
    """Verify every snapshot of ``config.snapshots`` whole; one JSON line each on ``out``."""
    assert config.snapshots is not None
    report = InspectReport()
    log = await open_reader(config.log.url, config.log.open_timeout_s)
    async with log:
        beginning = await _log_beginning(log)
        store = await open_snapshots(config.snapshots, config.log.open_timeout_s)
        try:
            for info in await store.infos():
                report.records += 1
                loaded = await store.newest_valid(older_than=info.generation + 1)
                error = None
                if loaded is None or loaded.info.generation != info.generation:
                    error = "does not load whole (see the warning above)"
                    report.bad += 1
                out.write(snapshot_line(info, error, beginning).decode())
                report.printed += 1
        finally:
            await store.close()
    verdict = "ok" if report.ok else "FAILED"
    err.write(
        f"inspect {redact(config.snapshots)}: {report.records} snapshots, "
        f"{report.bad} that do not load: {verdict}\n"
    )
    return report
