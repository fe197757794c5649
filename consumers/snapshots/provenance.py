"""Whether a snapshot is of the log it would be restored onto.

A snapshot's position is an offset into one log. Restored onto another (a store shared by
mistake, ``--snapshots`` pointing at the wrong place) or onto the same directory or topic after
it was wiped and written again, it would take a position the log never had: the follower would
skip the log's own records and report itself caught up. So before a snapshot is loaded:

- both identities known (the snapshot records its log's, ``log.identity``, and the log knows
  its own): they must be the same, else the snapshot is refused;
- either unknown (a snapshot written before snapshots recorded identities, a log no writer has
  opened since logs had identities, a broker too old to report topic ids): the snapshot is
  refused when its position lies beyond the log's end, the one sign of foreign state left to
  see; otherwise it loads, and a snapshot without an identity is named in a warning.

A refusal is a ``ForeignSnapshotError`` that names the store, the snapshot, both ids and what to
do. ``Follower.restore`` checks the snapshot it is about to load; ``swa-es inspect
--verify-snapshots`` reports a foreign snapshot as not usable.
"""

from __future__ import annotations

import logging

from consumers.errors import ForeignSnapshotError
from consumers.snapshots.base import SnapshotInfo
from log import EventLog, LogIdentity, Position, identity_of

logger = logging.getLogger(__name__)


def _beyond(position: Position, end: Position) -> dict[int, tuple[int, int]]:
    """The partitions where ``position`` lies past ``end``: partition -> (offset, end)."""
    return {
        p: (offset, end.get(p)) for p, offset in position.offsets.items() if offset > end.get(p)
    }


def _remedy(store: str) -> str:
    return (
        f"point the snapshot store (--snapshots) at this log's own store, or move {store} "
        "aside to rebuild from the log"
    )


def foreign_snapshot(
    store: str, info: SnapshotInfo, log_url: str, identity: LogIdentity | None, end: Position
) -> ForeignSnapshotError | None:
    """The refusal of snapshot ``info`` of ``store`` for the log at ``log_url`` (its
    ``identity``, its ``end`` now), or None when it may be restored (module docstring)."""
    recorded = info.log_identity
    snapshot_id = None if recorded is None else recorded.log_id
    log_id = None if identity is None else identity.log_id
    if recorded is not None and identity is not None:
        if recorded.same_log(identity):
            return None
        reason = (
            f"this store ({store}) holds snapshots of another log, or of an earlier incarnation "
            f"of this one (log id {snapshot_id}), and this log ({log_url}) has id {log_id}: "
            + _remedy(store)
        )
    else:
        beyond = _beyond(info.position, end)
        if not beyond:
            return None
        where = ", ".join(
            f"partition {p} offset {offset} > end {last}" for p, (offset, last) in beyond.items()
        )
        unknown = (
            "this snapshot records no log identity"
            if recorded is None
            else f"this log ({log_url}) records no identity to compare with the snapshot's "
            f"(log id {snapshot_id})"
        )
        reason = (
            f"its position lies beyond the end of this log ({log_url}: {where}) and {unknown}: "
            f"it was taken of another log, or of this log before it was wiped; " + _remedy(store)
        )
    return ForeignSnapshotError(
        store=store,
        snapshot=info.where,
        log=log_url,
        snapshot_log_id=snapshot_id,
        log_id=log_id,
        reason=reason,
    )


async def check_snapshot_of(log: EventLog, store: str, info: SnapshotInfo) -> None:
    """Raise ``ForeignSnapshotError`` unless snapshot ``info`` of ``store`` may be restored
    onto ``log``; warn when it records no log identity to check."""
    identity = await identity_of(log)
    refusal = foreign_snapshot(store, info, log.url, identity, await log.end())
    if refusal is not None:
        raise refusal
    if info.log_identity is None:
        logger.warning(
            "snapshot %s records no log identity (written before snapshots recorded one, or of "
            "a log that had none): it cannot be checked to be of %s (only that its position %s "
            "is within the log); the next snapshot written records %s",
            info.where,
            log.url,
            info.position,
            "this log's identity" if identity is not None else "the log's identity once it has one",
        )
