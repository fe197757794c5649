"""``swa-es inspect``: verify every record of a log and print its batches as JSON lines.

Each record is decoded strictly; its key must name the batch's source. A record that fails is
reported on stderr with its position and the scan goes on; a corrupt stretch of the log itself
(``CorruptRecordError``) ends the scan there, after everything before it was printed.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import orjson

from cache.events import DecodeError, EventBatch, batch_to_dict, decode_batch
from log import CorruptRecordError, Position, Record
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_FAILED, EXIT_OK
from swa_es.service.log_access import open_reader, redact


@dataclass(frozen=True, slots=True, kw_only=True)
class InspectConfig:
    """``swa-es inspect`` (each field is a row of ``settings.SETTINGS``)."""

    log_url: str
    start: Position | None
    source: str | None
    limit: int | None
    brief: bool
    open_timeout_s: float


def add_parser(subparsers: Any) -> None:
    """Add ``inspect`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        "inspect",
        help="verify every record and print batches as JSON lines",
        description="Decode every record strictly; print each batch as one JSON line on "
        "stdout, problems on stderr; exit 1 if any record is bad.",
        config_type=InspectConfig,
        run=run,
    )


def run(config: InspectConfig) -> int:
    """Run ``inspect`` on stdout/stderr; exit 1 when a record is bad."""

    async def main() -> int:
        report = await inspect(config, sys.stdout, sys.stderr)
        return EXIT_OK if report.ok else EXIT_FAILED

    return anyio.run(main, backend="asyncio")


@dataclass(slots=True)
class InspectReport:
    """What a scan found."""

    records: int = 0
    printed: int = 0
    bad: int = 0
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
    log = await open_reader(config.log_url, config.open_timeout_s)
    async with log:
        try:
            async for record in log.read(config.start or "beginning"):
                report.records += 1
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
        f"inspect {redact(config.log_url)}: {report.records} records read, "
        f"{report.printed} batches printed, {report.bad} bad records: {verdict}\n"
    )
    return report
