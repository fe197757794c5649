"""The log pin a snapshot store holds: one per store, named after the store.

A follower pins the log at the position of the oldest snapshot its store keeps, so retention
never deletes what a restore from that store needs. The pin is named after the store
(``snapshots-<hash of the store's resolved URL>``): followers writing different stores keep
separate pins (retention keeps the minimum of them all), and followers sharing a store agree on
one. A ``FileLog`` also records the pin's owner in the pin file (role and store, beside the
command, pid, host and time it records itself).
"""

from __future__ import annotations

import hashlib
import os

from consumers.snapshots.base import SnapshotStorage
from consumers.snapshots.opening import directory_of, is_kafka_url
from log import EventLog, Position
from log.file import FileLog

PIN_PREFIX = "snapshots-"
_HASH_HEX_CHARS = 16


def store_identity(store: SnapshotStorage) -> str:
    """What names ``store`` whatever path or spelling reached it: a directory store's resolved
    path, a Kafka store's URL (topic and group)."""
    url = store.url
    if is_kafka_url(url):
        return url
    return os.path.realpath(directory_of(url))


def snapshot_pin_name(store: SnapshotStorage) -> str:
    """The name of the log pin that ``store``'s snapshots hold."""
    digest = hashlib.sha256(store_identity(store).encode()).hexdigest()
    return PIN_PREFIX + digest[:_HASH_HEX_CHARS]


async def pin_for_store(log: EventLog, store: SnapshotStorage, position: Position | None) -> None:
    """Pin ``log`` at ``position`` under ``store``'s pin (None unpins), saying whose it is
    where the log records owners."""
    name = snapshot_pin_name(store)
    if isinstance(log, FileLog):
        await log.pin(name, position, owner={"role": "snapshots", "store": store_identity(store)})
    else:
        await log.pin(name, position)
