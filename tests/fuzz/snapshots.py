"""A small log with snapshots of it, and the documented snapshot format written independently.

``base_case()`` builds (once per process) a FileLog of two sources and a snapshot store a real
follower filled; tests copy it, plant a damaged or crafted snapshot as the newest generation,
and restore. ``encode_snapshot`` writes the format of ``consumers.snapshots.format`` from its
docstring, so a crafted file can carry any manifest with valid checksums.
"""

from __future__ import annotations

import functools
import random
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import crc32c
import orjson

from cache.events import encode_batch
from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStore, Stats
from log import open_log
from tests.consumers.primary_model import PrimaryModel

PLANTED_GENERATION = 999_999
RESTORE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class BaseCase:
    """The log's files, the snapshot files (oldest first) and every source's final digest."""

    log_files: dict[str, bytes]
    snapshot_files: dict[str, bytes]
    digests: dict[str, str]

    def lay_out(self, root: Path) -> tuple[Path, Path]:
        """Write the log and the snapshot store under ``root``; (log dir, snapshot dir)."""
        log_dir, snap_dir = root / "log", root / "snapshots"
        log_dir.mkdir(parents=True)
        snap_dir.mkdir(parents=True)
        for name, data in self.log_files.items():
            (log_dir / name).write_bytes(data)
        for name, data in self.snapshot_files.items():
            (snap_dir / name).write_bytes(data)
        return log_dir, snap_dir

    @property
    def newest_snapshot(self) -> bytes:
        """The bytes of the newest snapshot."""
        return self.snapshot_files[max(self.snapshot_files)]


def planted_name() -> str:
    """The file name of a snapshot newer than every real one."""
    return f"snapshot-{PLANTED_GENERATION:012d}.swasnap"


async def _build(root: Path) -> BaseCase:
    rng = random.Random(7)
    models = [PrimaryModel(f"worker-{i}", page_size=2) for i in range(2)]
    batches = [model.start_epoch(f"epoch-{i}") for i, model in enumerate(models)]
    for _ in range(40):
        model = rng.choice(models)
        prompt = [rng.randrange(4) for _ in range(4)] + [rng.randrange(50) for _ in range(4)]
        events = model.store(prompt)
        if rng.random() < 0.4:
            events += model.tombstone(model.hashes(prompt)[-1:])
        batches.append(model.batch(events, with_digest=rng.random() < 0.3))
    log_dir, snap_dir = root / "log", root / "snapshots"
    async with await open_log(log_dir.as_uri(), fsync="never") as log:
        await log.append_batch([(b.source, encode_batch(b)) for b in batches])
        replicas = ReplicaSet()
        follower = Follower(
            log,
            [replicas, PrefixIndex(replicas), Stats(replicas)],
            snapshots=SnapshotStore(snap_dir, keep=3),
            snapshot_every_batches=12,
        )
        await follower.catch_up()
    return BaseCase(
        log_files={p.name: p.read_bytes() for p in log_dir.iterdir() if p.is_file()},
        snapshot_files={p.name: p.read_bytes() for p in sorted(snap_dir.glob("snapshot-*"))},
        digests={m.source: m.digest.hexdigest() for m in models},
    )


@functools.cache
def base_case() -> BaseCase:
    """The shared case (built once)."""
    with tempfile.TemporaryDirectory() as tmp:
        return anyio.run(_build, Path(tmp))


def encode_snapshot(manifest: Any, views: list[bytes], *, version: int = 1) -> bytes:
    """A snapshot file with valid checksums around any manifest JSON value and view bytes."""
    body_manifest = orjson.dumps(manifest)
    head = struct.pack(
        "<8sIII", b"SWAESNAP", version, len(body_manifest), crc32c.crc32c(body_manifest)
    )
    body = head + body_manifest + b"".join(views)
    return body + struct.pack("<I", crc32c.crc32c(body))


def decode_snapshot(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """The manifest and view bytes of a well-formed snapshot file."""
    length = struct.unpack_from("<I", data, 12)[0]
    manifest = orjson.loads(data[20 : 20 + length])
    views, offset = [], 20 + length
    for _, size in manifest["views"]:
        views.append(data[offset : offset + size])
        offset += size
    return manifest, views


REPLICA_HEADER_FIELDS = ("block_size", "slots", "free", "capacity")


def replica_field_offsets(view: bytes) -> dict[str, int]:
    """Byte offsets of the replica count and of the first replica's u32 header fields in the
    replicas view (layout: ``native/src/replica/snapshot.rs``)."""
    offsets = {"count": 12}
    at = 16
    (name_length,) = struct.unpack_from("<I", view, at)
    at += 4 + name_length
    if view[at]:
        at += 1 + 4 + 4 + 1
        (json_length,) = struct.unpack_from("<I", view, at)
        at += 4 + json_length
    else:
        at += 1
    if view[at]:
        (reason_length,) = struct.unpack_from("<I", view, at + 1)
        at += 1 + 4 + reason_length
    else:
        at += 1
    for name in REPLICA_HEADER_FIELDS:
        offsets[name] = at
        at += 4
    return offsets


def with_inner_checksum(view_body: bytes) -> bytes:
    """A replicas view body (without its trailing CRC) with a valid CRC appended."""
    return view_body + struct.pack("<I", crc32c.crc32c(view_body))


def set_replica_u32(view: bytes, field_name: str, value: int) -> bytes:
    """The replicas view with one u32 field replaced and its checksum made valid again."""
    at = replica_field_offsets(view)[field_name]
    body = view[:-4]
    return with_inner_checksum(body[:at] + struct.pack("<I", value) + body[at + 4 :])


@dataclass
class Restored:
    """What a restore from the planted store gave."""

    generation: int | None
    digests: dict[str, str | None]
    diverged: dict[str, str]


async def restore_from(log_dir: Path, snap_dir: Path) -> Restored:
    """A fresh follower restores from ``snap_dir`` and catches up on ``log_dir``."""
    with anyio.fail_after(RESTORE_TIMEOUT_S):
        async with await open_log(log_dir.as_uri(), readonly=True) as log:
            replicas = ReplicaSet()
            follower = Follower(
                log,
                [replicas, PrefixIndex(replicas), Stats(replicas)],
                snapshots=SnapshotStore(snap_dir, keep=10),
            )
            await follower.restore()
        return Restored(
            follower.metrics.restored_generation,
            {source: replicas[source].state_digest() for source in replicas.sources()},
            follower.diverged(),
        )
