"""FileLog append throughput per fsync policy, each beside a raw baseline in the same process.

The raw baseline writes the same bytes per record (a FileLog frame's size) with one
``os.write`` per record to an ``O_APPEND`` file and ``os.fdatasync`` every N writes, which is
the durability FileLog gives under the same policy:

- ``always``: one appender awaiting each ``append``  vs fdatasync after every write;
- ``batch``: N (and 2N) concurrent appenders, ``batch_max_records=N``  vs fdatasync every N
  writes (with 2N appenders one batch fills while the previous one syncs);
- ``batch`` + ``append_batch``: N records per call  vs fdatasync every N writes;
- ``never``: N concurrent appenders  vs writes with no fdatasync.

Each pair runs ``--repeats`` times alternately (baseline, FileLog, ...) and the median is
reported, as appends/s and MB/s of payload (MB = 10^6 bytes), with the ratio FileLog/raw::

    .venv/bin/python bench/log_bench.py [--records 20000] [--payload-bytes 1024] [--batch 64]
        [--repeats 3] [--dir /tmp] [--kafka host:port] [--json OUT]

With ``--kafka`` it also runs ``bench/log_bench_kafka.py``'s ``run_kafka_bench``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from log.file import FileLog, FsyncPolicy
from log.file.framing import frame_bytes

KEY = "bench"


@dataclass(frozen=True, slots=True)
class Row:
    """One FileLog figure beside its baseline."""

    case: str
    records: int
    filelog_appends_s: float
    filelog_mb_s: float
    raw_appends_s: float
    raw_mb_s: float
    ratio: float


def raw_seconds(directory: Path, records: int, record_bytes: int, sync_every: int | None) -> float:
    """Seconds to write ``records`` records with os.write, fdatasync every ``sync_every``."""
    path = directory / f"raw-{time.monotonic_ns()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    record = os.urandom(record_bytes)
    try:
        started = time.perf_counter()
        for i in range(1, records + 1):
            os.write(fd, record)
            if sync_every is not None and i % sync_every == 0:
                os.fdatasync(fd)
        if sync_every is not None and records % sync_every:
            os.fdatasync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()


Workload = Callable[[FileLog, int, bytes], Awaitable[None]]


async def sequential(log: FileLog, records: int, payload: bytes) -> None:
    """One appender awaiting each append."""
    for _ in range(records):
        await log.append(KEY, payload)


def concurrent(tasks: int) -> Workload:
    """``tasks`` appenders, each awaiting its own appends."""

    async def run(log: FileLog, records: int, payload: bytes) -> None:
        async def appender(count: int) -> None:
            for _ in range(count):
                await log.append(KEY, payload)

        async with anyio.create_task_group() as tg:
            for task in range(tasks):
                tg.start_soon(appender, records // tasks + (task < records % tasks))

    return run


def batched(size: int) -> Workload:
    """One appender handing ``size`` records to each append_batch call."""

    async def run(log: FileLog, records: int, payload: bytes) -> None:
        for start in range(0, records, size):
            await log.append_batch([(KEY, payload)] * min(size, records - start))

    return run


async def filelog_seconds(
    directory: Path, records: int, payload: bytes, fsync: FsyncPolicy, batch: int, work: Workload
) -> float:
    """Seconds from the first append to the last acknowledgement (open and close excluded)."""
    log_dir = directory / f"log-{time.monotonic_ns()}"
    log = await FileLog.open(log_dir, fsync=fsync, batch_max_records=batch, batch_max_delay_s=0.05)
    try:
        started = time.perf_counter()
        await work(log, records, payload)
        return time.perf_counter() - started
    finally:
        await log.close()
        for child in log_dir.iterdir():
            child.unlink()
        log_dir.rmdir()


def measure(
    case: str, directory: Path, records: int, payload: bytes, fsync: FsyncPolicy, batch: int,
    work: Workload, sync_every: int | None, repeats: int,
) -> Row:  # fmt: skip
    """Median of ``repeats`` alternating runs of the baseline and FileLog."""
    record_bytes = frame_bytes(KEY.encode(), payload)
    raw, ours = [], []
    for _ in range(repeats):
        raw.append(raw_seconds(directory, records, record_bytes, sync_every))
        ours.append(anyio.run(filelog_seconds, directory, records, payload, fsync, batch, work))
    raw_rate = records / statistics.median(raw)
    our_rate = records / statistics.median(ours)
    mb = len(payload) / 1e6
    return Row(case, records, our_rate, our_rate * mb, raw_rate, raw_rate * mb, our_rate / raw_rate)


def kafka_bench(bootstrap: str, record_bytes: int, count: int) -> dict[str, Any]:
    """Run the Kafka teammate's bench (imported only when asked for)."""
    path = Path(__file__).with_name("log_bench_kafka.py")
    spec = importlib.util.spec_from_file_location("log_bench_kafka", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result: dict[str, Any] = module.run_kafka_bench(bootstrap, record_bytes, count)
    return result


def print_table(rows: list[Row], payload_bytes: int, batch: int) -> None:
    """The figures as a Markdown table."""
    print(f"\nFileLog vs raw os.write+fdatasync, payload {payload_bytes} B, N={batch}\n")
    print(
        "| case | records | FileLog appends/s | FileLog MB/s | raw appends/s | raw MB/s | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.case} | {r.records} | {r.filelog_appends_s:,.0f} | {r.filelog_mb_s:.1f} "
            f"| {r.raw_appends_s:,.0f} | {r.raw_mb_s:.1f} | {r.ratio:.2f} |"
        )


def main() -> None:
    """Command line: run every case and print the table (and JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64, help="N: records per fdatasync")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--kafka", help="host:port of a broker for the KafkaLog figures")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    payload = os.urandom(args.payload_bytes)
    n, records, repeats = args.batch, args.records, args.repeats
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        directory = Path(scratch)
        always_records = max(n, records // 20)
        rows = [
            measure("always, 1 appender", directory, always_records, payload, "always", n,
                    sequential, 1, repeats),
            measure(f"batch, {n} appenders", directory, records, payload, "batch", n,
                    concurrent(n), n, repeats),
            measure(f"batch, {2 * n} appenders", directory, records, payload, "batch", n,
                    concurrent(2 * n), n, repeats),
            measure(f"batch, append_batch({n})", directory, records, payload, "batch", n,
                    batched(n), n, repeats),
            measure(f"never, {n} appenders", directory, records, payload, "never", n,
                    concurrent(n), None, repeats),
        ]  # fmt: skip
    print_table(rows, args.payload_bytes, n)
    result: dict[str, Any] = {"file": [asdict(r) for r in rows]}
    if args.kafka:
        result["kafka"] = kafka_bench(args.kafka, args.payload_bytes, records)
        print("\nKafka:", orjson.dumps(result["kafka"]).decode())
    if args.json:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
