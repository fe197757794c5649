"""A log's identity: written when a writer creates (or first opens) a FileLog directory, stable
while the directory lives, new when it is wiped and written again; every backend says it."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from log import (
    KnowsItsIdentity,
    LogIdentity,
    LogIdentityError,
    MemoryLog,
    identity_of,
    open_log,
)
from log.file import FileLog
from log.file.identity import IDENTITY_FILE
from swa_es.testing import FailingLog, SlowLog


async def test_a_writer_records_an_identity_that_readers_see_and_reopens_keep(
    tmp_path: Path,
) -> None:
    """The first writer writes identity.json; a reader and a later writer see the same id."""
    directory = tmp_path / "log"
    async with await FileLog.open(directory) as writer:
        first = await writer.identity()
        await writer.append("k", b"v")
    assert first is not None and len(first.log_id) == 32 and first.created_at is not None
    assert orjson.loads((directory / IDENTITY_FILE).read_bytes())["id"] == first.log_id
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    async with await FileLog.open(directory, readonly=True) as reader:
        assert await reader.identity() == first
    async with await FileLog.open(directory) as again:
        assert await again.identity() == first
    assert isinstance(again, KnowsItsIdentity)


async def test_two_logs_and_a_wiped_and_recreated_log_have_different_ids(tmp_path: Path) -> None:
    """Another directory is another log; deleting a log's directory and writing it again makes
    a new incarnation with a new id."""
    async with await FileLog.open(tmp_path / "a") as a, await FileLog.open(tmp_path / "b") as b:
        id_a, id_b = await a.identity(), await b.identity()
    assert id_a is not None and id_b is not None and not id_a.same_log(id_b)
    shutil.rmtree(tmp_path / "a")
    async with await FileLog.open(tmp_path / "a") as recreated:
        again = await recreated.identity()
    assert again is not None and not again.same_log(id_a)


async def test_a_log_older_than_identities_gets_one_at_its_next_writer_open(
    tmp_path: Path,
) -> None:
    """Segments but no identity file (a log written before identities): readers see None, the
    next writer adds one under its lock, the records stay."""
    directory = tmp_path / "log"
    async with await FileLog.open(directory) as writer:
        await writer.append_batch([("k", b"1"), ("k", b"2")])
    (directory / IDENTITY_FILE).unlink()
    async with await FileLog.open(directory, readonly=True) as reader:
        assert await reader.identity() is None
        async with await FileLog.open(directory) as writer:
            added = await writer.identity()
            assert added is not None
            assert [r.payload async for r in writer.read()] == [b"1", b"2"]
        assert await reader.identity() == added  # a reader that saw None looks again


async def test_a_damaged_identity_file_is_an_error_naming_it(tmp_path: Path) -> None:
    """A damaged identity is never taken for a missing one (a new id would make snapshots of
    this log look foreign, or worse, foreign ones look like this log's)."""
    directory = tmp_path / "log"
    async with await FileLog.open(directory):
        pass
    (directory / IDENTITY_FILE).write_bytes(b'{"id": 7')
    with pytest.raises(LogIdentityError, match=IDENTITY_FILE):
        await FileLog.open(directory)
    async with await FileLog.open(directory, readonly=True) as reader:
        with pytest.raises(LogIdentityError, match="damaged"):
            await reader.identity()


async def test_memory_logs_and_test_wrappers_say_their_identity() -> None:
    """Every MemoryLog is its own log; the test doubles answer for the log they wrap."""
    one, other = MemoryLog(), MemoryLog()
    first = await one.identity()
    assert not first.same_log(await other.identity())
    assert await identity_of(SlowLog(one)) == first
    assert await identity_of(FailingLog(one, [])) == first
    assert await identity_of(object()) is None


async def test_open_log_urls_give_logs_with_identities(tmp_path: Path) -> None:
    """``open_log`` of a file:// URL hands back a log that knows its identity."""
    async with await open_log((tmp_path / "log").as_uri()) as log:
        assert await identity_of(log) is not None


def test_log_identity_round_trips_and_rejects_bad_fields() -> None:
    """``to_obj``/``from_obj`` round-trip; a bad field raises ValueError naming it."""
    identity = LogIdentity("abc", 12.5)
    assert LogIdentity.from_obj(orjson.loads(orjson.dumps(identity.to_obj()))) == identity
    assert LogIdentity.from_obj({"id": "x"}) == LogIdentity("x")
    for bad, field in (
        ([], "object"),
        ({"id": ""}, "id"),
        ({"id": "x", "created_at": "no"}, "created_at"),
    ):
        with pytest.raises(ValueError, match=field):
            LogIdentity.from_obj(bad)
