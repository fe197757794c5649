"""Snapshots record the identity of their log; a snapshot of another log, or of this log before
it was wiped, is refused on restore (and by ``inspect --verify-snapshots``), never loaded."""

from __future__ import annotations

import logging
import shutil
import struct
from pathlib import Path

import anyio
import crc32c
import orjson
import pytest

from consumers import (
    DirectorySnapshotStore,
    Follower,
    ForeignSnapshotError,
    ReplicaSet,
    SnapshotInfo,
    Stats,
)
from consumers.snapshots.chunks import Manifest
from consumers.snapshots.format import MAGIC, VERSION, read_info
from log import LogIdentity, Position
from log.file import FileLog
from log.file.identity import IDENTITY_FILE
from swa_es.cli import main
from tests.consumers.primary_model import PrimaryModel, record

_HEAD = struct.Struct("<8sIII")  # magic | version | manifest length | manifest crc32c
_CRC = struct.Struct("<I")


async def write_log(directory: Path, source: str, batches: int) -> LogIdentity:
    """A FileLog of ``batches`` well-formed batches of one source; its identity."""
    model = PrimaryModel(source)
    stream = [model.start_epoch()]
    stream += [model.batch(model.store([i % 7, i, i + 1])) for i in range(batches - 1)]
    async with await FileLog.open(directory) as log:
        await log.append_batch([record(b) for b in stream])
        identity = await log.identity()
    assert identity is not None
    return identity


def follower_of(log: FileLog, store: DirectorySnapshotStore) -> tuple[Follower, ReplicaSet]:
    replicas = ReplicaSet()
    return Follower(log, [replicas, Stats(replicas)], snapshots=store), replicas


async def snapshot_of(directory: Path, store: DirectorySnapshotStore) -> SnapshotInfo:
    """Replay the log in ``directory`` and write one snapshot of it into ``store``."""
    async with await FileLog.open(directory, readonly=True) as log:
        follower, _ = follower_of(log, store)
        await follower.catch_up()
        return await follower.snapshot()


def strip_identity(path: Path) -> None:
    """Rewrite a snapshot file as snapshots were written before they recorded their log: the
    same layout, a manifest without the ``log`` field."""
    data = path.read_bytes()
    magic, version, length, _ = _HEAD.unpack_from(data)
    manifest = orjson.loads(data[_HEAD.size : _HEAD.size + length])
    del manifest["log"]
    views = data[_HEAD.size + length : -_CRC.size]
    encoded = orjson.dumps(manifest)
    body = _HEAD.pack(magic, version, len(encoded), crc32c.crc32c(encoded)) + encoded + views
    path.write_bytes(body + _CRC.pack(crc32c.crc32c(body)))


async def test_snapshots_record_the_identity_of_their_log(tmp_path: Path) -> None:
    """A follower's snapshot names its log's id, in the file and in what the store lists."""
    identity = await write_log(tmp_path / "a", "w", 20)
    info = await snapshot_of(tmp_path / "a", DirectorySnapshotStore(tmp_path / "snaps"))
    assert info.log_identity == identity
    assert read_info(info.path).log_identity == identity
    loaded = await DirectorySnapshotStore(tmp_path / "snaps").newest_valid()
    assert loaded is not None and loaded.info.log_identity == identity
    data = info.path.read_bytes()
    _, version, length, _ = _HEAD.unpack_from(data)
    assert data.startswith(MAGIC) and version == VERSION == 1  # old builds read it too
    assert orjson.loads(data[_HEAD.size : _HEAD.size + length])["log"] == identity.to_obj()


async def test_a_follower_refuses_a_store_of_another_log(tmp_path: Path) -> None:
    """Log B's follower, given log A's store, is refused with an error naming the store, the
    snapshot, both ids and what to do; it loads nothing."""
    id_a = await write_log(tmp_path / "a", "w", 50)
    id_b = await write_log(tmp_path / "b", "w", 80)  # longer: the position alone would pass
    store = DirectorySnapshotStore(tmp_path / "snaps")
    info = await snapshot_of(tmp_path / "a", store)
    async with await FileLog.open(tmp_path / "b", readonly=True) as log:
        follower, replicas = follower_of(log, store)
        with pytest.raises(ForeignSnapshotError) as refused:
            await follower.restore()
    error = refused.value
    assert (error.snapshot_log_id, error.log_id) == (id_a.log_id, id_b.log_id)
    message = str(error)
    for part in (info.where, str(tmp_path / "snaps"), id_a.log_id, id_b.log_id, "--snapshots"):
        assert part in message
    assert "move" in message and "aside" in message
    assert follower.position == Position() and replicas.sources() == []


async def test_a_wiped_and_recreated_log_refuses_its_old_snapshots(tmp_path: Path) -> None:
    """The same directory written again after a wipe is a new log: its old snapshots are
    refused even where their position lies within the new log."""
    old = await write_log(tmp_path / "a", "w", 30)
    store = DirectorySnapshotStore(tmp_path / "snaps")
    await snapshot_of(tmp_path / "a", store)
    shutil.rmtree(tmp_path / "a")
    new = await write_log(tmp_path / "a", "w", 60)
    assert not new.same_log(old)
    async with await FileLog.open(tmp_path / "a", readonly=True) as log:
        follower, _ = follower_of(log, store)
        with pytest.raises(ForeignSnapshotError, match=old.log_id):
            await follower.restore()


async def test_a_snapshot_without_identity_loads_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot written before snapshots recorded their log still loads (with a warning),
    and the follower's next snapshot records the log's identity."""
    identity = await write_log(tmp_path / "a", "w", 40)
    store = DirectorySnapshotStore(tmp_path / "snaps")
    info = await snapshot_of(tmp_path / "a", store)
    strip_identity(info.path)
    assert read_info(info.path).log_identity is None
    async with await FileLog.open(tmp_path / "a", readonly=True) as log:
        follower, replicas = follower_of(log, store)
        with caplog.at_level(logging.WARNING, logger="consumers.snapshots.provenance"):
            loaded = await follower.restore()
        assert loaded is not None and loaded.generation == info.generation
        assert replicas.sources() == ["w"]
        assert info.where in caplog.text and "records no log identity" in caplog.text
        assert (await follower.snapshot()).log_identity == identity


async def test_a_snapshot_without_identity_beyond_the_log_end_is_refused(
    tmp_path: Path,
) -> None:
    """Without an identity to compare, a position past the log's end is the sign of foreign
    state: refused."""
    await write_log(tmp_path / "a", "w", 60)
    await write_log(tmp_path / "b", "w", 10)
    store = DirectorySnapshotStore(tmp_path / "snaps")
    info = await snapshot_of(tmp_path / "a", store)
    strip_identity(info.path)
    async with await FileLog.open(tmp_path / "b", readonly=True) as log:
        follower, _ = follower_of(log, store)
        with pytest.raises(ForeignSnapshotError, match="beyond the end") as refused:
            await follower.restore()
    assert "partition 0 offset 60 > end 10" in str(refused.value)
    assert refused.value.snapshot_log_id is None


async def test_a_log_without_identity_checks_the_position_only(tmp_path: Path) -> None:
    """A log no writer has opened since identities (no identity file): a snapshot within its
    end loads, one beyond it is refused, naming the snapshot's id."""
    await write_log(tmp_path / "a", "w", 60)
    store = DirectorySnapshotStore(tmp_path / "snaps")
    info = await snapshot_of(tmp_path / "a", store)
    (tmp_path / "a" / IDENTITY_FILE).unlink()
    async with await FileLog.open(tmp_path / "a", readonly=True) as log:
        follower, _ = follower_of(log, store)
        assert await follower.restore() == info
    await write_log(tmp_path / "b", "w", 10)
    (tmp_path / "b" / IDENTITY_FILE).unlink()
    async with await FileLog.open(tmp_path / "b", readonly=True) as log:
        follower, _ = follower_of(log, store)
        with pytest.raises(ForeignSnapshotError, match="records no identity"):
            await follower.restore()


def test_kafka_manifests_carry_the_identity_and_old_ones_still_parse() -> None:
    """The record manifest of a Kafka store names the log; one written before it did parses
    with no identity."""
    identity = LogIdentity("topic-id", None)
    manifest = Manifest(
        "000000000001-ab", 1, "ab", 1.0, Position.of({0: 3}), {}, (4,), (5,), 4, 5, 9, identity
    )
    assert Manifest.from_value(manifest.to_value()).log_identity == identity
    value = manifest.to_value()
    body = orjson.loads(value[8 + 4 :])
    del body["log"]
    encoded = orjson.dumps(body)
    old = value[:8] + struct.pack("<I", crc32c.crc32c(encoded)) + encoded
    assert Manifest.from_value(old).log_identity is None


# --- through the command line -------------------------------------------------------------


def _logs_and_foreign_store(tmp_path: Path) -> tuple[Path, Path, Path]:
    async def build() -> None:
        await write_log(tmp_path / "a", "w", 50)
        await write_log(tmp_path / "b", "w", 80)

    anyio.run(build)
    a, b, snaps = tmp_path / "a", tmp_path / "b", tmp_path / "snaps"
    assert main(["snapshot", "--log", str(a), "--snapshots", str(snaps)]) == 0
    return a, b, snaps


def test_restore_and_follow_refuse_a_foreign_store_and_say_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``swa-es restore`` and ``swa-es follow`` on log B with log A's store exit 1 with one line
    naming the store and what to do."""
    _, b, snaps = _logs_and_foreign_store(tmp_path)
    capsys.readouterr()
    assert main(["restore", "--log", str(b), "--snapshots", str(snaps)]) == 1
    err = capsys.readouterr().err
    assert "swa-es restore: error: snapshot" in err and "another log" in err
    assert str(snaps) in err and "--snapshots" in err and "Traceback" not in err
    follow = ["follow", "--log", str(b), "--snapshots", str(snaps), "--duration-s", "5"]
    assert main(follow) == 1
    err = capsys.readouterr().err
    assert "swa-es follow: error: snapshot" in err and "another log" in err


def test_inspect_verify_snapshots_reports_a_foreign_snapshot_as_not_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Verified against log B, log A's snapshot is listed as not valid, saying why."""
    a, b, snaps = _logs_and_foreign_store(tmp_path)
    capsys.readouterr()
    assert main(["inspect", "--log", str(a), "--verify-snapshots", str(snaps)]) == 0
    own = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert own["valid"] is True and own["log_id"] is not None
    assert main(["inspect", "--log", str(b), "--verify-snapshots", str(snaps)]) == 1
    line = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert line["valid"] is False and "another log" in line["error"]
