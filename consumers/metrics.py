"""The follower's counters, as a plain dataclass that a metrics endpoint can export."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


@dataclass(slots=True)
class FollowerMetrics:
    """Counters of one follower; every field is a number (or None when not yet known).

    Liveness records are not batches: ``heartbeats_read`` and ``offline_markers_read`` count
    those heard, ``liveness_stale_skipped`` those from another epoch or before the cursor.
    ``lag_records`` and ``lag_s`` say how far the follower is behind the log's end, as of its
    last look at the end (``consumers.lag``): records the log holds past its position, and how
    long the log has held records it has not applied (both 0 when caught up).
    ``snapshots_written`` and ``snapshot_failures`` count snapshot writes that succeeded and
    failed; ``last_snapshot_at`` (epoch seconds) is when the last snapshot written or restored
    was taken.
    """

    records_read: int = 0
    batches_applied: int = 0
    events_applied: int = 0
    duplicates_skipped: int = 0
    stale_skipped: int = 0
    skipped_while_diverged: int = 0
    undecodable: int = 0
    heartbeats_read: int = 0
    offline_markers_read: int = 0
    liveness_stale_skipped: int = 0
    gaps: int = 0
    bad_epoch_starts: int = 0
    inconsistent_batches: int = 0
    digests_checked: int = 0
    digest_mismatches: int = 0
    digests_unverifiable: int = 0
    divergences: int = 0
    diverged_sources: int = 0
    lag_records: int = 0
    lag_s: float = 0.0
    snapshots_written: int = 0
    snapshot_failures: int = 0
    last_snapshot_at: float | None = None
    restored_generation: int | None = None

    @property
    def snapshot_age_s(self) -> float | None:
        """Seconds since the last snapshot was written or restored (None: never)."""
        if self.last_snapshot_at is None:
            return None
        return max(0.0, time.time() - self.last_snapshot_at)

    def as_dict(self) -> dict[str, float | int | None]:
        """Every counter, plus ``snapshot_age_s``."""
        values: dict[str, float | int | None] = asdict(self)
        values["snapshot_age_s"] = self.snapshot_age_s
        return values
