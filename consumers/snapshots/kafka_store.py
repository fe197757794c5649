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
- **Pruning**: before a write the store reads what the group's writers added since its last
  scan; after it, snapshots of the group beyond the newest ``keep`` (whoever wrote them) are
  tombstoned, manifest first, then their chunks; so are the records of generations older than
  every kept snapshot that no good manifest names (a killed writer's chunks). Compaction then
  frees them.
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
from log import LogIdentity, Position
from log.kafka.blob_topic import BlobTopic

logger = logging.getLogger(__name__)

_KEY_ROOM_BYTES = 512


@dataclass(slots=True)
class _Seen:
    """What scans found of the group's keys (the last record of each key wins): manifest values,
    which chunks are there (values only when a scan keeps them), each snapshot's generation."""

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

    def live_keys(self, group: str, snap: str) -> list[str]:
        """The keys of ``snap`` that still hold a value: its manifest first, then its chunks."""
        keys = [manifest_key(group, snap)] if self.manifests.get(snap) is not None else []
        chunks = self.chunks.get(snap, {})
        return keys + [
            chunk_key(group, snap, i) for i, value in sorted(chunks.items()) if value is not None
        ]

    def forget(self, snap: str) -> None:
        """``snap`` was tombstoned."""
        self.manifests.pop(snap, None)
        self.chunks.pop(snap, None)


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
        # what this instance knows of the group's keys, and where its last scan ended
        self._seen = _Seen()
        self._scanned_to: dict[int, int] = {}

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
            manifest.log_identity,
        )

    async def _scan(self, *, whole: bool) -> _Seen:
        """Read the group's records: all of them, chunk values kept (``whole``), or only those
        written since the last scan, noting which chunks are there. Either way ``_seen`` is
        brought up to date (a whole scan replaces it)."""
        seen = _Seen() if whole else self._seen
        reached: dict[int, int] = {}
        start = None if whole else self._scanned_to
        async for record in self.topic.scan(f"{self.group}/", start=start, reached=reached):
            parsed = parse_key(self.group, record.key)
            if parsed is None:
                continue
            seen.generations[parsed.snap] = parsed.generation
            if parsed.chunk is None:
                seen.manifests[parsed.snap] = record.value
            else:
                kept = record.value if whole else (b"" if record.value is not None else None)
                seen.chunks.setdefault(parsed.snap, {})[parsed.chunk] = kept
        self._scanned_to = reached
        if whole:
            self._seen = _Seen(
                dict(seen.manifests),
                {
                    snap: {i: (b"" if v is not None else None) for i, v in chunks.items()}
                    for snap, chunks in seen.chunks.items()
                },
                dict(seen.generations),
            )
        return seen

    # --- writing --------------------------------------------------------------------------

    async def write(
        self,
        position: Position,
        cursors: Any,
        views: Mapping[str, bytes],
        digests: Mapping[str, str | None] | None = None,
        *,
        log_identity: LogIdentity | None = None,
    ) -> SnapshotInfo:
        """Write the chunks, then (all acknowledged) the manifest; then prune. ``log_identity``
        is recorded in both the snapshot and its manifest."""
        await self._scan(whole=False)  # learn what other writers of the group did meanwhile
        generation = 1 + max(self._seen.generations.values(), default=0)
        snap = snap_id(generation, self.writer)
        data = await anyio.to_thread.run_sync(
            encode_snapshot, generation, position, cursors, views, digests, log_identity
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
            log_identity,
        )
        key = manifest_key(self.group, snap)
        # the manifest's own record counts too (as sized before this field was filled in)
        stored += len(key) + len(manifest.to_value())
        manifest = dataclasses.replace(manifest, stored_bytes=stored)
        value = manifest.to_value()
        await self.topic.put([(key, value)])
        self._seen.generations[snap] = generation
        self._seen.chunks[snap] = dict.fromkeys(range(len(pieces)), b"")
        self._seen.manifests[snap] = value
        await self._prune()
        return self._info(manifest)

    async def _prune(self) -> None:
        """Tombstone the group's snapshots beyond the newest ``keep``, and the records of older
        generations no good manifest names (a killed writer's chunks, an unreadable manifest)."""
        seen = self._seen
        ordered = seen.good_manifests(self.topic.url)
        dropped = ordered[: max(0, len(ordered) - self.keep)]
        kept = ordered[len(dropped) :]
        oldest_kept = kept[0].generation if kept else 0
        named = {m.snap for m in kept}
        doomed = [m.snap for m in dropped] + [
            snap
            for snap, generation in seen.generations.items()
            if snap not in named and generation < oldest_kept  # newer: maybe in the making
        ]
        tombstones: list[tuple[str, bytes | None]] = []
        for snap in dict.fromkeys(doomed):
            tombstones += [(key, None) for key in seen.live_keys(self.group, snap)]
            seen.forget(snap)
        if tombstones:
            await self.topic.put(tombstones)
            logger.info("tombstoned %d records of older snapshots on %s", len(tombstones), self.url)

    # --- reading --------------------------------------------------------------------------

    async def infos(self) -> list[SnapshotInfo]:
        """Snapshots whose manifest checks out, oldest first (chunks not checked)."""
        seen = await self._scan(whole=False)
        return [self._info(m) for m in seen.good_manifests(self.topic.url)]

    async def oldest_kept_position(self) -> Position | None:
        """The position of the oldest snapshot kept (as of this instance's last scan)."""
        if not self._scanned_to:
            await self._scan(whole=False)
        ordered = self._seen.good_manifests(self.topic.url)
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
            or snapshot.info.log_identity != manifest.log_identity
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
        scan = await self._scan(whole=True)
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
