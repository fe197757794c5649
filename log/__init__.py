"""Ordered, durable logs of keyed opaque records: embedded files (default) or Kafka.

``await open_log("file:///dir?fsync=batch")`` or ``await open_log("kafka://host:9092/topic")``.
This package imports nothing of the rest of the project.
"""

from log.base import BatchReader, EventLog
from log.errors import (
    ConfigError,
    CorruptRecordError,
    LogClosedError,
    LogDiskFullError,
    LogError,
    LogLockedError,
    LogUnavailableError,
    LogWriteError,
)
from log.memory import MemoryLog
from log.opening import open_log
from log.position import Position, Record, StartAt

__all__ = [
    "BatchReader",
    "EventLog",
    "open_log",
    "MemoryLog",
    "Position",
    "Record",
    "StartAt",
    "LogError",
    "ConfigError",
    "CorruptRecordError",
    "LogClosedError",
    "LogDiskFullError",
    "LogLockedError",
    "LogUnavailableError",
    "LogWriteError",
]
