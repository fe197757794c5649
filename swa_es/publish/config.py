"""``PublisherConfig``: how a publisher queues, batches, appends and retries (frozen, validated).

The checks (``positive_int``, ``at_least``, ``non_negative_seconds``) are shared with
``BatchBuilder``; each raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from swa_es.publish.overflow import OverflowPolicy

BATCH_OVERHEAD_BYTES: Final = 4096
"""Room for a batch's envelope and meta (a few hundred bytes, generously)."""
DEFAULT_DIGEST_EVERY_BATCHES: Final = 16
DEFAULT_MAX_EVENTS_PER_BATCH: Final = 20_000
DEFAULT_MAX_BATCH_BYTES: Final = 4 * 1024 * 1024
"""Well under the 16 MiB record limit of the logs and of ``decode_batch``."""


def at_least(name: str, value: object, low: int) -> int:
    """``value`` when it is an int (not a bool) >= ``low``; else ``ValueError`` naming ``name``."""
    if type(value) is not int or value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    return value


def positive_int(name: str, value: object) -> int:
    """``value`` when it is an int >= 1."""
    return at_least(name, value, 1)


def non_negative_seconds(name: str, value: object, *, optional: bool = False) -> None:
    """Accept a finite or infinite number of seconds >= 0 (``None`` too when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name}: expected a number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PublisherConfig:
    """How a ``Publisher`` works; every field has a default.

    ``max_queue_batches`` bounds the batches waiting for the log; ``overflow`` is what a full
    queue does (``"resync"`` or ``"block"``, see ``OverflowPolicy``); ``digest_every_batches``
    sets the in-band digest cadence; ``max_append_batch`` / ``max_append_bytes`` bound one
    ``append_batch`` call; ``max_events_per_batch`` and ``max_batch_bytes`` split a huge step (or
    epoch opening) over several batches, so no record nears the logs' 16 MiB limit; a retriable
    log error is retried ``append_retries`` times, ``retry_backoff_s`` apart (doubling);
    leaving the publisher's context cleanly flushes within ``close_timeout_s`` (``None``: no
    limit). Liveness (``cache.events.liveness``): a publisher that appended nothing for
    ``heartbeat_s`` seconds appends a heartbeat (``None``: never), and with ``offline_on_close``
    leaving its context cleanly appends an offline marker after the last batch. With
    ``token_ids=False`` the source is token-free: every ``BlockStored`` is written without its
    token ids (``token_ids=()``; its hashes, block size and pages as ever) and each epoch's
    meta says so (``BatchMeta.token_ids``), so no token id reaches the log (docs/security.md).
    A bad value raises ``ValueError`` naming the field.
    """

    max_queue_batches: int = 1024
    overflow: OverflowPolicy | str = OverflowPolicy.RESYNC
    digest_every_batches: int = DEFAULT_DIGEST_EVERY_BATCHES
    max_append_batch: int = 64
    max_append_bytes: int = 4 * 1024 * 1024
    max_events_per_batch: int = DEFAULT_MAX_EVENTS_PER_BATCH
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    append_retries: int = 3
    retry_backoff_s: float = 0.05
    close_timeout_s: float | None = 30.0
    heartbeat_s: float | None = None
    offline_on_close: bool = False
    token_ids: bool = True

    def __post_init__(self) -> None:
        # A str names a policy ("block"); store the enum so the config compares and prints alike.
        object.__setattr__(self, "overflow", OverflowPolicy.parse(self.overflow))
        for name in (
            "max_queue_batches",
            "digest_every_batches",
            "max_append_batch",
            "max_append_bytes",
            "max_events_per_batch",
        ):
            positive_int(name, getattr(self, name))
        at_least("max_batch_bytes", self.max_batch_bytes, BATCH_OVERHEAD_BYTES)
        at_least("append_retries", self.append_retries, 0)
        non_negative_seconds("retry_backoff_s", self.retry_backoff_s)
        non_negative_seconds("close_timeout_s", self.close_timeout_s, optional=True)
        non_negative_seconds("heartbeat_s", self.heartbeat_s, optional=True)
        if self.heartbeat_s is not None and not 0 < self.heartbeat_s < float("inf"):
            raise ValueError(
                f"heartbeat_s: expected a positive finite number, got {self.heartbeat_s!r}"
            )
        for name in ("offline_on_close", "token_ids"):
            if type(getattr(self, name)) is not bool:
                raise ValueError(f"{name}: expected a bool, got {getattr(self, name)!r}")
