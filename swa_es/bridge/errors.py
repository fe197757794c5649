"""The error of an engine event the bridge's mirror cannot translate without guessing."""

from __future__ import annotations

from cache.errors import SwaEsError


class MirrorError(SwaEsError):
    """An engine event the mirror cannot translate without guessing (the source is lost).

    ``field`` names the part of the event that does not fit (``group_idx``,
    ``kv_cache_spec_sliding_window``, ``block_hashes[3]``, ...), ``reason`` says why.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
