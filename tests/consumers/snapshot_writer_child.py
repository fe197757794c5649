"""A snapshot writer that stops for good between its chunks and its manifest (a test child).

``python -m tests.consumers.snapshot_writer_child URL GROUP``: writes a snapshot's chunks the
way ``KafkaSnapshotStore.write`` does, prints ``chunks acknowledged`` once the broker has them
and then waits to be killed, so its manifest is never written.
"""

from __future__ import annotations

import sys

import anyio

from consumers import KafkaSnapshotStore, open_snapshot_store
from consumers.snapshots.chunks import chunk_key, encode_chunk, snap_id, split
from consumers.snapshots.format import encode_snapshot
from log import Position


async def main(url: str, group: str) -> None:
    store = await open_snapshot_store(url, group=group)
    assert isinstance(store, KafkaSnapshotStore)
    infos = await store.infos()
    generation = 1 + max((info.generation for info in infos), default=0)
    snap = snap_id(generation, store.writer)
    data = encode_snapshot(generation, Position.of({0: 99}), {}, {"v": b"killed" * 3000})
    pieces = split(data, store.chunk_bytes)
    await store.topic.put(
        [(chunk_key(group, snap, i), encode_chunk(piece)) for i, piece in enumerate(pieces)]
    )
    print("chunks acknowledged", flush=True)
    await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], backend="asyncio")
