"""``KafkaSnapshotStore``: snapshots as chunks and manifests on a compacted Kafka topic.

Followers on any machine reach the same snapshots, so a follower started on an empty disk
bootstraps from the newest one even after retention deleted the start of the event log. The
record layout is ``consumers.snapshots.chunks``; the topic itself is a ``log.kafka.BlobTopic``
(created with ``cleanup.policy=compact``).

- **Writing**: the snapshot's bytes are cut into chunks under the topic's
  ``max.message.bytes``; every chunk is acknowledged before the manifest naming them is sent,
  so a writer killed mid-way leaves chunks no manifest names (ignored, and tombstoned later).
- **Reading**: one scan of the group's keys (last value per key wins); manifests are tried
  newest first (generation, then creation time). A snapshot is used only when every chunk it
  names is there and checks out, the whole matches the manifest's checksum, and the bytes parse
  as a snapshot whose position matches the manifest's; otherwise the one before is tried.
- **Pruning**: after a write, snapshots of the group beyond the newest ``keep`` (of every writer
  this store has seen) are tombstoned, manifest first, then their chunks; so are chunks of
  generations older than every kept snapshot that no manifest names (a killed writer's).
  Compaction then frees them.
- **Sharing**: keys start with the group name; each store instance writes under its own random
  writer id, so two followers of one group writing at once never write the same key.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import crc32c

from consumers.errors import SnapshotError
from consumers.snapshots.base import Snapshot, SnapshotInfo
from consumers.snapshots.chunks import (
    GROUP,
    HEADER_BYTES,
    ChunkError,
    Manifest,
    chunk_key,
    decode_chunk,
    encode_chunk,
    manifest_key,
    parse_key,
    snap_id,
    split,
)
from consumers.snapshots.format import decode_snapshot, encode_snapshot
from log import Position
from log.kafka.blob_topic import BlobTopic

logger = logging.getLogger(__name__)

_KEY_ROOM_BYTES = 512


@dataclass(slots=True)
class _Scan:
    """What one scan of the group's keys found: the last value of every key."""

    manifests: dict[str, bytes | None] = field(default_factory=dict)
    chunks: dict[str, dict[int, bytes | None]] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)

    def good_manifests(self, where: str) -> list[Manifest]:
        """The manifests that parse, oldest first; bad ones are logged and left out."""
        found = []
        for snap, value in self.manifests.items():
            if value is None:
                continue
            try:
                manifest = Manifest.from_value(value)
            except ChunkError as exc:
                logger.warning("skipping snapshot %s#%s: %s", where, snap, exc)
                continue
            if manifest.snap != snap:
                logger.warning(
                    "skipping snapshot %s#%s: its manifest names %s", where, snap, manifest.snap
                )
                continue
            found.append(manifest)
        return sorted(found, key=_order)


def _order(manifest: Manifest) -> tuple[int, float, str]:
    return (manifest.generation, manifest.created_at, manifest.snap)


class KafkaSnapshotStore:
    """Snapshots of follower group ``group`` on a compacted topic; the newest ``keep`` kept."""

    def __init__(self, topic: BlobTopic, group: str, *, keep: int = 3) -> None:
        if type(keep) is not int or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        if not GROUP.match(group):
            raise ValueError(f"group must be letters, digits, '.', '_' or '-', got {group!r}")
        self.topic = topic
        self.group = group
        self.keep = keep
        self.writer = secrets.token_hex(4)
        self.chunk_bytes = topic.max_value_bytes - HEADER_BYTES - _KEY_ROOM_BYTES
        # manifests known to this instance (from its scans and its own writes), by snap
        self._known: dict[str, Manifest] | None = None
        # records of the group no good manifest names (index -1: an unreadable manifest)
        self._orphans: dict[str, set[int]] = {}
        self._orphan_generations: dict[str, int] = {}

    @property
    def url(self) -> str:
        """The topic's URL and the group."""
        return f"{self.topic.url}#{self.group}"

    def _info(self, manifest: Manifest) -> SnapshotInfo:
        name = f"{self.group}/{manifest.snap}"
        return SnapshotInfo(
            name,
            f"{self.topic.url}#{name}",
            manifest.generation,
            manifest.position,
            manifest.created_at,
            manifest.stored_bytes,
            dict(manifest.digests),
        )

    async def _scan(self) -> _Scan:
        scan = _Scan()
        async for record in self.topic.scan(f"{self.group}/"):
            parsed = parse_key(self.group, record.key)
            if parsed is None:
                continue
            scan.generations[parsed.snap] = parsed.generation
            if parsed.chunk is None:
                scan.manifests[parsed.snap] = record.value
            else:
                scan.chunks.setdefault(parsed.snap, {})[parsed.chunk] = record.value
        self._remember(scan)
        return scan

    def _remember(self, scan: _Scan) -> None:
        known = {m.snap: m for m in scan.good_manifests(self.topic.url)}
        self._known = known
        self._orphans = {
            snap: {index for index, value in chunks.items() if value is not None}
            for snap, chunks in scan.chunks.items()
            if scan.manifests.get(snap) is None and any(v is not None for v in chunks.values())
        }
        for snap, value in scan.manifests.items():
            if value is not None and snap not in known:  # an unreadable manifest: prune it too
                self._orphans.setdefault(snap, set()).add(-1)
        self._orphan_generations = dict(scan.generations)

    # --- writing --------------------------------------------------------------------------

    async def write(
        self,
        position: Position,
        cursors: Any,
        views: Mapping[str, bytes],
        digests: Mapping[str, str | None] | None = None,
    ) -> SnapshotInfo:
        """Write the chunks, then (all acknowledged) the manifest; then prune."""
        if self._known is None:
            await self._scan()
        assert self._known is not None
        generation = 1 + max((m.generation for m in self._known.values()), default=0)
        snap = snap_id(generation, self.writer)
        data = await anyio.to_thread.run_sync(
            encode_snapshot, generation, position, cursors, views, digests
        )
        pieces = split(data, self.chunk_bytes)
        records = [(chunk_key(self.group, snap, i), encode_chunk(p)) for i, p in enumerate(pieces)]
        stored = sum(len(key) + len(value) for key, value in records)
        await self.topic.put(records)
        manifest = Manifest(
            snap,
            generation,
            self.writer,
            time.time(),
            position,
            dict(digests or {}),
            tuple(len(p) for p in pieces),
            tuple(crc32c.crc32c(p) for p in pieces),
            len(data),
            crc32c.crc32c(data),
            stored,
        )
        value = manifest.to_value()
        key = manifest_key(self.group, snap)
        # the manifest's own record counts too (as sized before this field was filled in)
        manifest = dataclasses.replace(manifest, stored_bytes=stored + len(key) + len(value))
        await self.topic.put([(key, manifest.to_value())])
        self._known[snap] = manifest
        await self._prune()
        return self._info(manifest)

    async def _prune(self) -> None:
        assert self._known is not None
        ordered = sorted(self._known.values(), key=_order)
        dropped = ordered[: max(0, len(ordered) - self.keep)]
        kept = ordered[len(dropped) :]
        tombstones: list[tuple[str, bytes | None]] = []
        for manifest in dropped:
            tombstones.append((manifest_key(self.group, manifest.snap), None))
            tombstones += [
                (chunk_key(self.group, manifest.snap, i), None)
                for i in range(len(manifest.chunk_sizes))
            ]
            del self._known[manifest.snap]
        oldest_kept = kept[0].generation if kept else 0
        for snap, indices in list(self._orphans.items()):
            if self._orphan_generations.get(snap, oldest_kept) >= oldest_kept:
                continue  # maybe a live writer's snapshot in the making
            for index in sorted(indices):
                key = (
                    manifest_key(self.group, snap)
                    if index < 0
                    else chunk_key(self.group, snap, index)
                )
                tombstones.append((key, None))
            del self._orphans[snap]
        if tombstones:
            await self.topic.put(tombstones)
            logger.info("tombstoned %d records of older snapshots on %s", len(tombstones), self.url)

    # --- reading --------------------------------------------------------------------------

    async def infos(self) -> list[SnapshotInfo]:
        """Snapshots whose manifest checks out, oldest first (chunks not checked)."""
        scan = await self._scan()
        return [self._info(m) for m in scan.good_manifests(self.topic.url)]

    async def oldest_kept_position(self) -> Position | None:
        """The position of the oldest snapshot this instance knows is kept."""
        if self._known is None:
            await self._scan()
        assert self._known is not None
        ordered = sorted(self._known.values(), key=_order)
        return ordered[0].position if ordered else None

    def _assemble(self, manifest: Manifest, chunks: Mapping[int, bytes | None]) -> Snapshot:
        where = f"{self.topic.url}#{self.group}/{manifest.snap}"
        pieces = []
        for index, (size, crc) in enumerate(
            zip(manifest.chunk_sizes, manifest.chunk_crcs, strict=True)
        ):
            value = chunks.get(index)
            if value is None:
                raise SnapshotError(
                    where, f"chunk {index} of {len(manifest.chunk_sizes)} is missing"
                )
            try:
                data = decode_chunk(value)
            except ChunkError as exc:
                raise SnapshotError(where, f"chunk {index}: {exc.reason}") from None
            if len(data) != size or crc32c.crc32c(data) != crc:
                raise SnapshotError(where, f"chunk {index} is not the one the manifest names")
            pieces.append(data)
        data = b"".join(pieces)
        if len(data) != manifest.size_bytes or crc32c.crc32c(data) != manifest.crc:
            raise SnapshotError(where, "chunks do not add up to the manifest's checksum")
        snapshot = decode_snapshot(data, f"{self.group}/{manifest.snap}", where)
        if (
            snapshot.info.position != manifest.position
            or snapshot.info.generation != manifest.generation
        ):
            raise SnapshotError(
                where, "the snapshot's own manifest disagrees with the record manifest"
            )
        return Snapshot(self._info(manifest), snapshot.cursors, snapshot.views)

    async def newest_valid(
        self, required_views: Collection[str] = (), *, older_than: int | None = None
    ) -> Snapshot | None:
        """The newest complete snapshot whose chunks all verify and which holds every view in
        ``required_views`` (generations below ``older_than`` when given); None when none."""
        scan = await self._scan()
        for manifest in reversed(scan.good_manifests(self.topic.url)):
            if older_than is not None and manifest.generation >= older_than:
                continue
            chunks = scan.chunks.get(manifest.snap, {})
            try:
                snapshot = await anyio.to_thread.run_sync(self._assemble, manifest, chunks)
            except SnapshotError as exc:
                logger.warning("skipping snapshot %s", exc)
                continue
            missing = sorted(set(required_views) - set(snapshot.views))
            if missing:
                logger.warning(
                    "skipping snapshot %s: it lacks views %s", snapshot.info.where, missing
                )
                continue
            return snapshot
        return None

    async def close(self) -> None:
        """Close the topic's producer."""
        await self.topic.close()
