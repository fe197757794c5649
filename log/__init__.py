"""Ordered, durable logs of keyed opaque records: embedded files (default) or Kafka.

``await open_log("file:///dir?fsync=batch")`` or ``await open_log("kafka://host:9092/topic")``.
This package imports nothing of the rest of the project but its root error (``cache.errors``).
"""

from log.base import BatchReader, EventLog, KnowsItsBeginning, KnowsItsIdentity, identity_of
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
from log.identity import LogIdentity, LogIdentityError
from log.memory import MemoryLog
from log.opening import LogScheme, log_schemes, open_log, register_scheme
from log.position import Position, Record, StartAt

__all__ = [
    "BatchReader",
    "EventLog",
    "KnowsItsBeginning",
    "KnowsItsIdentity",
    "LogIdentity",
    "identity_of",
    "open_log",
    "LogScheme",
    "log_schemes",
    "register_scheme",
    "MemoryLog",
    "Position",
    "Record",
    "StartAt",
    "LogError",
    "LogIdentityError",
    "ConfigError",
    "CorruptRecordError",
    "LogClosedError",
    "LogDiskFullError",
    "LogLockedError",
    "LogUnavailableError",
    "LogWriteError",
]
