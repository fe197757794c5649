"""The bridge's counters (exported at ``/metrics`` as ``swa_es_bridge_*``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class BridgeMetrics:
    """Counters of one bridge; ``unknown`` is 1 while the source's state is unknown.

    ``received``: live messages; ``replayed``: batches the replay socket sent; ``gaps``: seq
    gaps met (live or in a replay); ``unfilled_gaps``: those the replay could not fill (passed
    on to followers); ``epochs``: epochs opened in the log; ``restarts``: engine restarts seen;
    ``undecodable``: messages or batches that could not be read; ``unknown_events``: events of
    types this bridge does not know (skipped); ``duplicates``: live messages a replay had
    already delivered; ``batches_applied``: engine batches turned into our batches;
    ``disconnects``: live connections to the engine that dropped (its exits and restarts);
    ``engine_offline``: times the engine went unheard past the engine timeout (each marked
    offline in the log).
    """

    received: int = 0
    replayed: int = 0
    gaps: int = 0
    unfilled_gaps: int = 0
    epochs: int = 0
    restarts: int = 0
    undecodable: int = 0
    unknown_events: int = 0
    duplicates: int = 0
    batches_applied: int = 0
    replay_requests: int = 0
    replay_timeouts: int = 0
    disconnects: int = 0
    engine_offline: int = 0
    unknown: int = 0

    def as_dict(self) -> dict[str, int]:
        """Every counter by name."""
        return asdict(self)
