"""``open_snapshot_store(url)``: a snapshot directory (a path or ``file://``) or a Kafka topic.

``kafka://host:port[,host:port]/TOPIC?group=NAME`` opens a ``KafkaSnapshotStore`` on a
compacted topic (created unless it exists). Its query takes ``group`` (the follower group whose
snapshots these are; default ``default``), ``segment_ms`` (the topic's ``segment.ms`` when this
creates it) and every connection option of a ``kafka://`` log (``security_protocol``, SASL and
TLS options, ``replication_factor``, ``partitions``, ``max_record_bytes``: the largest record,
default 1 MiB, the broker's own default limit...). A text without a URL scheme is a directory
path; any other scheme is refused (``STORE_SCHEMES``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from consumers.snapshots.base import SnapshotStorage
from consumers.snapshots.chunks import GROUP
from consumers.snapshots.directory import DirectorySnapshotStore
from log import ConfigError

STORE_SCHEMES: Final = ("file", "kafka")
"""The URL schemes of a snapshot store (the command line's ``--snapshots`` accepts these)."""
DEFAULT_GROUP = "default"
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024 - 1024


def is_kafka_url(url: str | os.PathLike[str]) -> bool:
    """Whether ``url`` names a Kafka snapshot store."""
    return isinstance(url, str) and url.startswith("kafka://")


def directory_of(url: str | os.PathLike[str]) -> Path:
    """The directory a path or ``file://`` URL names."""
    text = os.fspath(url)
    if text.startswith("file://"):
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise ConfigError("snapshots", f"file:// URL with a host: {text!r}")
        return Path(unquote(parts.path))
    return Path(text)


async def open_snapshot_store(
    url: str | os.PathLike[str], *, keep: int = 3, **options: Any
) -> SnapshotStorage:
    """The store ``url`` names (see the module docstring); keyword ``options`` override the
    query of a ``kafka://`` URL. Close it when done."""
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme and scheme not in STORE_SCHEMES:
        raise ConfigError(
            "snapshots", f"unknown store scheme {scheme!r} in {url!r} (a directory, file, kafka)"
        )
    if not is_kafka_url(url):
        if options:
            raise ConfigError(sorted(options)[0], "options are for kafka:// snapshot stores")
        return DirectorySnapshotStore(directory_of(url), keep=keep)
    # Imported here: aiokafka is the optional `kafka` extra, and a directory store needs none of it.
    from consumers.snapshots.kafka_store import KafkaSnapshotStore
    from log.kafka.blob_topic import DEFAULT_SEGMENT_MS, BlobTopic
    from log.kafka.options import parse_options

    parts = urlsplit(str(url))
    query: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(options)
    group = str(query.pop("group", DEFAULT_GROUP))
    if not GROUP.match(group):
        raise ConfigError("group", f"expected letters, digits, '.', '_' or '-', got {group!r}")
    segment_ms = query.pop("segment_ms", DEFAULT_SEGMENT_MS)
    try:
        segment_ms = int(segment_ms)
    except (TypeError, ValueError):
        raise ConfigError("segment_ms", f"expected an integer, got {segment_ms!r}") from None
    query.setdefault("max_record_bytes", DEFAULT_MAX_RECORD_BYTES)
    kafka_options = parse_options(parts.netloc, parts.path, query)
    if type(keep) is not int or keep < 1:
        raise ConfigError("keep", f"must be a positive int, got {keep!r}")
    topic = await BlobTopic.open(kafka_options, segment_ms=segment_ms)
    return KafkaSnapshotStore(topic, group, keep=keep)
