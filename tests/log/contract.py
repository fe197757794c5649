"""The backend contract of ``log.EventLog``: one suite every backend runs.

Use it by subclassing ``LogContract`` in a test module and providing a ``log_factory``
fixture: an async callable that opens a *fresh, empty* log on each call. The tests open logs
inside their own bodies (``async with await log_factory() as log``), so a backend's task
groups are entered and left in the same task. Set ``durable = False`` on a backend whose
records do not survive ``close`` (the reopen test is skipped for it)::

    class TestMyLog(LogContract):
        @pytest.fixture
        def log_factory(self, tmp_path) -> LogFactory:
            async def factory() -> EventLog:
                return await open_log(f"file://{tmp_path}/{uuid4().hex}")
            return factory

The suite never assumes a partition count: ordering is checked per key and per partition.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

from log import BatchReader, EventLog, LogClosedError, Position, Record, StartAt, open_log

LogFactory = Callable[[], Awaitable[EventLog]]
FOLLOW_TIMEOUT_S = 30.0


async def read_all(log: EventLog, start: StartAt = "beginning") -> list[Record]:
    """Every record from ``start`` to the end taken when the read began."""
    return [record async for record in log.read(start)]


async def read_n(log: EventLog, count: int, start: StartAt = "beginning") -> list[Record]:
    """The first ``count`` records of a following read (fails rather than hangs)."""
    records: list[Record] = []
    with anyio.fail_after(FOLLOW_TIMEOUT_S):
        async for record in log.read(start, follow=True):
            records.append(record)
            if len(records) == count:
                break
    return records


class LogContract:
    """Behaviour every ``EventLog`` backend must show; subclass and provide ``log_factory``."""

    durable: bool = True

    @pytest.fixture
    def log_factory(self) -> LogFactory:
        """Overridden by each backend: opens a fresh, empty log per call."""
        raise NotImplementedError("a LogContract subclass must provide a log_factory fixture")

    async def test_is_an_event_log(self, log_factory: LogFactory) -> None:
        """A backend satisfies the EventLog protocol and names itself with a URL."""
        async with await log_factory() as log:
            assert isinstance(log, EventLog)
            assert "://" in log.url

    async def test_empty_log_reads_nothing(self, log_factory: LogFactory) -> None:
        """A fresh log yields no records and its end is at offset 0 of every partition."""
        async with await log_factory() as log:
            assert await read_all(log) == []
            end = await log.end()
            assert all(end.get(p) == 0 for p in end.partitions())

    async def test_append_returns_own_position(self, log_factory: LogFactory) -> None:
        """append returns the record's own position, and reading finds it there."""
        async with await log_factory() as log:
            position = await log.append("source-a", b"first")
            records = await read_all(log)
            assert len(records) == 1
            record = records[0]
            assert record.position == position
            assert (record.key, record.payload) == ("source-a", b"first")

    async def test_records_per_key_keep_append_order(self, log_factory: LogFactory) -> None:
        """Records of one key are read back in the order they were appended."""
        async with await log_factory() as log:
            for i in range(30):
                await log.append(f"key-{i % 3}", f"{i}".encode())
            records = await read_all(log)
            assert len(records) == 30
            for k in range(3):
                payloads = [r.payload for r in records if r.key == f"key-{k}"]
                assert payloads == [f"{i}".encode() for i in range(k, 30, 3)]

    async def test_offsets_grow_per_partition(self, log_factory: LogFactory) -> None:
        """Offsets within a partition strictly increase in read order."""
        async with await log_factory() as log:
            for i in range(20):
                await log.append(f"k{i % 4}", b"x")
            last: dict[int, int] = {}
            for record in await read_all(log):
                assert record.offset > last.get(record.partition, -1)
                last[record.partition] = record.offset

    async def test_append_batch_positions_in_order(self, log_factory: LogFactory) -> None:
        """append_batch returns one position per record, and each record is found there."""
        async with await log_factory() as log:
            batch = [("src", f"r{i}".encode()) for i in range(10)]
            positions = await log.append_batch(batch)
            assert len(positions) == 10
            records = await read_all(log)
            assert [r.position for r in records] == positions
            assert [r.payload for r in records] == [p for _, p in batch]

    async def test_append_batch_empty(self, log_factory: LogFactory) -> None:
        """An empty batch appends nothing and returns no positions."""
        async with await log_factory() as log:
            assert await log.append_batch([]) == []
            assert await read_all(log) == []

    async def test_end_is_after_last_record(self, log_factory: LogFactory) -> None:
        """end() is the position where the next record of each partition will land."""
        async with await log_factory() as log:
            positions = [await log.append("src", b"p") for _ in range(5)]
            end = await log.end()
            last = positions[-1]
            partition = next(iter(last.partitions()))
            assert end.get(partition) == last.get(partition) + 1
            record = (await read_all(log))[-1]
            assert end.covers(Position.after(record))

    async def test_read_from_position_is_inclusive(self, log_factory: LogFactory) -> None:
        """Reading from a record's position starts with that record."""
        async with await log_factory() as log:
            positions = [await log.append("src", f"{i}".encode()) for i in range(10)]
            records = await read_all(log, positions[4])
            assert [r.payload for r in records if r.key == "src"] == [
                f"{i}".encode() for i in range(4, 10)
            ]

    async def test_resume_after_record_via_json(self, log_factory: LogFactory) -> None:
        """Position.after(record), round-tripped through JSON, resumes just past it."""
        async with await log_factory() as log:
            for i in range(6):
                await log.append("src", f"{i}".encode())
            records = await read_all(log)
            resume = Position.from_json(Position.after(records[2]).to_json())
            rest = await read_all(log, resume)
            assert [r.payload for r in rest] == [b"3", b"4", b"5"]

    async def test_read_from_end_yields_nothing(self, log_factory: LogFactory) -> None:
        """A non-following read from "end" returns at once with nothing."""
        async with await log_factory() as log:
            await log.append("src", b"old")
            assert await read_all(log, "end") == []

    async def test_read_batches_hands_over_what_read_yields(self, log_factory: LogFactory) -> None:
        """A backend that reads a poll at a time gives the records ``read`` gives, from any
        start, in non-empty lists of one partition's records in offset order."""
        async with await log_factory() as log:
            if not isinstance(log, BatchReader):
                pytest.skip("this backend hands over records one by one only")
            positions = await log.append_batch([(f"k{i % 3}", f"{i}".encode()) for i in range(50)])
            for start in ("beginning", positions[17], "end"):
                batches = [b async for b in log.read_batches(start)]
                for batch in batches:
                    assert batch
                    assert len({r.partition for r in batch}) == 1
                    assert [r.offset for r in batch] == sorted(r.offset for r in batch)
                by_poll = [r for b in batches for r in b]
                one_by_one = await read_all(log, start)
                # partitions interleave as the polls go; each partition's order is the log's
                assert sorted(by_poll) == sorted(one_by_one)

    async def test_read_stops_at_end_taken_at_start(self, log_factory: LogFactory) -> None:
        """A non-following read does not chase records appended while it iterates."""
        async with await log_factory() as log:
            for i in range(5):
                await log.append("src", f"{i}".encode())
            seen = []
            async for record in log.read("beginning"):
                seen.append(record.payload)
                if len(seen) == 1:
                    await log.append("src", b"late")
            assert seen == [b"0", b"1", b"2", b"3", b"4"]

    async def test_follow_sees_later_appends(self, log_factory: LogFactory) -> None:
        """A following read yields records appended after it started waiting."""
        async with await log_factory() as log:
            await log.append("src", b"before")
            received: list[Record] = []
            async with anyio.create_task_group() as tg:

                async def follower() -> None:
                    received.extend(await read_n(log, 4, "beginning"))

                tg.start_soon(follower)
                for i in range(3):
                    await log.append("src", f"after-{i}".encode())
            assert [r.payload for r in received] == [b"before", b"after-0", b"after-1", b"after-2"]

    async def test_follow_from_end_skips_old_records(self, log_factory: LogFactory) -> None:
        """Following from the end taken at the start yields only new records."""
        async with await log_factory() as log:
            await log.append("src", b"old")
            start = await log.end()
            await log.append("src", b"new")
            records = await read_n(log, 1, start)
            assert [r.payload for r in records] == [b"new"]

    async def test_payloads_round_trip_exactly(self, log_factory: LogFactory) -> None:
        """Empty, binary and larger payloads and non-ASCII keys come back byte for byte."""
        payloads = [b"", bytes(range(256)), b"\x00" * 1000, bytes(200_000)]
        async with await log_factory() as log:
            for payload in payloads:
                await log.append("clé-✓", payload)
            records = await read_all(log)
            assert [r.payload for r in records] == payloads
            assert {r.key for r in records} == {"clé-✓"}

    async def test_timestamps_are_wall_clock_seconds(self, log_factory: LogFactory) -> None:
        """Record timestamps are seconds since the epoch, taken around the append."""
        async with await log_factory() as log:
            before = time.time()
            await log.append("src", b"t")
            after = time.time()
            (record,) = await read_all(log)
            assert isinstance(record.timestamp, float)
            assert before - 5.0 <= record.timestamp <= after + 5.0

    async def test_concurrent_appends_all_land(self, log_factory: LogFactory) -> None:
        """Appends from many tasks at once all get distinct positions and are all readable."""
        async with await log_factory() as log:
            positions: list[Position] = []

            async def writer(task: int) -> None:
                for i in range(10):
                    positions.append(await log.append(f"t{task}", f"{task}:{i}".encode()))

            async with anyio.create_task_group() as tg:
                for task in range(8):
                    tg.start_soon(writer, task)
            assert len(set(positions)) == 80
            records = await read_all(log)
            assert {r.position for r in records} == set(positions)
            for task in range(8):
                mine = [r.payload for r in records if r.key == f"t{task}"]
                assert mine == [f"{task}:{i}".encode() for i in range(10)]

    async def test_pin_and_unpin_are_accepted(self, log_factory: LogFactory) -> None:
        """pin takes a position and None, and never removes records by itself."""
        async with await log_factory() as log:
            position = await log.append("src", b"keep")
            await log.pin("snapshot", position)
            await log.pin("snapshot", None)
            assert [r.payload for r in await read_all(log)] == [b"keep"]

    async def test_closed_log_refuses_calls(self, log_factory: LogFactory) -> None:
        """After close, append, append_batch, end and read raise LogClosedError."""
        log = await log_factory()
        await log.append("src", b"x")
        await log.close()
        with pytest.raises(LogClosedError):
            await log.append("src", b"y")
        with pytest.raises(LogClosedError):
            await log.append_batch([("src", b"y")])
        with pytest.raises(LogClosedError):
            await log.end()
        with pytest.raises(LogClosedError):
            await read_all(log)
        await log.close()

    async def test_close_wakes_followers(self, log_factory: LogFactory) -> None:
        """A follower waiting for records fails with LogClosedError when the log closes."""
        log = await log_factory()
        failures: list[BaseException] = []

        async def follower() -> None:
            try:
                async for _ in log.read("end", follow=True):
                    pass
            except LogClosedError as exc:
                failures.append(exc)

        with anyio.fail_after(FOLLOW_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower)
                await anyio.sleep(0.05)
                await log.close()
        assert len(failures) == 1

    async def test_reopen_keeps_records(self, log_factory: LogFactory) -> None:
        """Records survive close and reopen through the log's own URL."""
        if not self.durable:
            pytest.skip("this backend keeps nothing after close")
        async with await log_factory() as log:
            positions = await log.append_batch([("src", b"a"), ("src", b"b")])
            url = log.url
        async with await open_log(url) as again:
            records = await read_all(again)
            assert [r.payload for r in records] == [b"a", b"b"]
            assert [r.position for r in records] == positions
            after = await again.append("src", b"c")
            partition = next(iter(positions[-1].partitions()))
            assert after.get(partition) == positions[-1].get(partition) + 1
