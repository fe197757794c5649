"""KafkaLog append throughput against Kafka's own ProducerPerformance, on one broker, one run.

Both producers write ``count`` records of ``record_bytes`` to a fresh one-partition topic each,
with the same settings (acks=all, idempotence on, linger 2 ms, 1 MiB batches), and the figure is
MB/s of payload acknowledged (MB = 10^6 bytes), the median of alternating runs.
``run_kafka_bench`` returns both and their ratio;
``bench/log_bench.py`` calls it, and it runs on its own too::

    .venv/bin/python bench/log_bench_kafka.py [--bootstrap host:port] [--record-bytes 1024]
        [--count 200000] [--repeats 3]

Without ``--bootstrap`` it starts a broker with tools/kafka/kafka.sh and stops it after.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import orjson

from log.kafka import KafkaLog, parse_options

REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "tools" / "kafka" / "kafka.sh"
CHUNK_RECORDS = 1000
WRITERS = 4
LINGER_MS = 2
BATCH_BYTES = 1024 * 1024
_SUMMARY = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec")


async def _kafkalog_seconds(bootstrap: str, record_bytes: int, count: int) -> float:
    """Seconds for KafkaLog to have ``count`` records acknowledged (WRITERS tasks, each
    appending CHUNK_RECORDS-record batches one after another)."""
    topic = f"bench-kafkalog-{uuid.uuid4().hex[:8]}"
    options = parse_options(
        bootstrap,
        f"/{topic}",
        {"partitions": 1, "linger_ms": LINGER_MS, "max_batch_bytes": BATCH_BYTES},
    )
    payload = bytes(record_bytes)
    chunks = [min(CHUNK_RECORDS, count - start) for start in range(0, count, CHUNK_RECORDS)]
    async with await KafkaLog.open(options) as log:
        await log.append("warm-up", payload)

        async def writer(mine: list[int]) -> None:
            for size in mine:
                await log.append_batch([("bench", payload)] * size)

        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for w in range(WRITERS):
                tasks.start_soon(writer, chunks[w::WRITERS])
        seconds = time.perf_counter() - started
        stored = (await log.end()).get(0)
        if stored != count + 1:
            raise RuntimeError(f"the topic holds {stored} records, not {count + 1}")
        return seconds


def _producer_performance_records_s(bootstrap: str, record_bytes: int, count: int) -> float:
    """Records/s that org.apache.kafka.tools.ProducerPerformance reports for the same load."""
    topic = f"bench-java-{uuid.uuid4().hex[:8]}"
    anyio.run(_create_topic, bootstrap, topic)
    command = [
        str(KAFKA_SH),
        "tool",
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(count),
        "--record-size",
        str(record_bytes),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
        "enable.idempotence=true",
        f"linger.ms={LINGER_MS}",
        f"batch.size={BATCH_BYTES}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True)
    summary = _SUMMARY.findall(done.stdout)
    if not summary:
        raise RuntimeError(f"no summary line from ProducerPerformance:\n{done.stdout[-2000:]}")
    sent, records_s = summary[-1]
    if int(sent) != count:
        raise RuntimeError(f"ProducerPerformance sent {sent} records, not {count}")
    return float(records_s)


async def _create_topic(bootstrap: str, topic: str) -> None:
    """Create a one-partition topic the way KafkaLog would."""
    async with await KafkaLog.open(parse_options(bootstrap, f"/{topic}", {"partitions": 1})):
        pass


def run_kafka_bench(
    bootstrap: str, record_bytes: int, count: int, *, repeats: int = 3
) -> dict[str, Any]:
    """KafkaLog MB/s and ProducerPerformance MB/s for ``count`` records of ``record_bytes`` on
    the broker at ``bootstrap``, and their ratio (KafkaLog / ProducerPerformance).

    The two alternate ``repeats`` times (so a busy machine slows both alike); each figure is the
    median of its runs, and every run's MB/s is listed too."""
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(repeats):
        seconds = anyio.run(_kafkalog_seconds, bootstrap, record_bytes, count)
        ours.append(count / seconds * record_bytes / 1e6)
        java_records_s = _producer_performance_records_s(bootstrap, record_bytes, count)
        theirs.append(java_records_s * record_bytes / 1e6)
    kafkalog_mb_s = statistics.median(ours)
    java_mb_s = statistics.median(theirs)
    return {
        "record_bytes": record_bytes,
        "count": count,
        "repeats": repeats,
        "kafkalog_mb_s": round(kafkalog_mb_s, 2),
        "producer_performance_mb_s": round(java_mb_s, 2),
        "ratio": round(kafkalog_mb_s / java_mb_s, 3),
        "kafkalog_mb_s_runs": [round(x, 2) for x in ours],
        "producer_performance_mb_s_runs": [round(x, 2) for x in theirs],
    }


def _start_broker() -> tuple[str, str]:
    port = str(19500 + uuid.uuid4().int % 400 * 2)
    done = subprocess.run(
        [str(KAFKA_SH), "start", "--port", port, "--fresh"],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return done.stdout.strip(), port


def main() -> None:
    """Command line: run the bench and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="host:port of a broker (default: start one)")
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    port = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        bootstrap, port = _start_broker()
    try:
        result = run_kafka_bench(bootstrap, args.record_bytes, args.count, repeats=args.repeats)
    finally:
        if port is not None:
            subprocess.run(
                [str(KAFKA_SH), "stop", "--port", port, "--clean"], check=False, timeout=120
            )
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
