"""``LogIdentity``: which log, and which incarnation of it, a position belongs to.

A position means nothing without its log: offset 5000 of one log is not offset 5000 of another,
nor of the same directory after it was wiped and written again. A log that knows its identity
(``log.base.KnowsItsIdentity``) says so: a ``FileLog`` writes a random id into its directory
when a writer first opens it (``log.file.identity``), a Kafka log is its topic's id (a topic
deleted and created again gets a new one), a ``MemoryLog`` draws one per instance. Whatever
records a position (a snapshot) records the identity beside it, so a reader can refuse a
position of another log instead of trusting it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from log.errors import LogError


class LogIdentityError(LogError):
    """A log's recorded identity cannot be read (``where`` names it; ``reason`` says why)."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"log identity {where}: {reason}")


@dataclass(frozen=True, slots=True)
class LogIdentity:
    """A log's id (an opaque string, unique per log and per incarnation of it) and, when the
    backend knows it, when that incarnation was created (Unix seconds). Two identities are the
    same log when their ``log_id`` is the same."""

    log_id: str
    created_at: float | None = None

    def __post_init__(self) -> None:
        if type(self.log_id) is not str or not self.log_id:
            raise ValueError(f"log_id must be a non-empty str, got {self.log_id!r}")
        if self.created_at is not None and type(self.created_at) is not float:
            raise ValueError(f"created_at must be a float or None, got {self.created_at!r}")

    def same_log(self, other: LogIdentity) -> bool:
        """Whether ``other`` names the same log (and incarnation) as this one."""
        return self.log_id == other.log_id

    def to_obj(self) -> dict[str, Any]:
        """A JSON object ``{"id": ..., "created_at": ...}`` (``from_obj`` reads it back)."""
        return {"id": self.log_id, "created_at": self.created_at}

    @classmethod
    def from_obj(cls, raw: object) -> LogIdentity:
        """Parse what ``to_obj`` wrote; ``ValueError`` naming the field on anything else."""
        if type(raw) is not dict:
            raise ValueError(f"a log identity must be a JSON object, got {type(raw).__name__}")
        log_id, created_at = raw.get("id"), raw.get("created_at")
        if type(log_id) is not str or not log_id:
            raise ValueError(f"log identity id must be a non-empty string, got {log_id!r}")
        if created_at is not None and type(created_at) not in (int, float):
            raise ValueError(f"log identity created_at must be a number, got {created_at!r}")
        return cls(log_id, None if created_at is None else float(created_at))

    def __str__(self) -> str:
        return self.log_id


def new_log_identity() -> LogIdentity:
    """A fresh identity: a random id (uuid4, hex) created now."""
    return LogIdentity(uuid.uuid4().hex, time.time())
