"""The routing API's answers, read from a follower's views (``/v1/match``, ``/v1/sources``).

``state`` is ``"exact"`` when the follower holds the source's stream without a gap and
``"unknown"`` when it does not (diverged: a gap, an unknown epoch start, a digest mismatch);
unknown lengths are ``null``, never guessed. ``usable_tokens`` is also ``null`` for a source
whose stream carries no tombstones (an engine bridged from ZMQ: meta ``swa_events`` false).
A prompt sent as block hashes can only be matched against sources of the same page size;
the others answer ``"page_size_mismatch"`` with ``null`` lengths.

Every answer carries ``as_of``: the follower's read position in the log (partition -> next
offset), its lag behind the log's end in records (refreshed about once a second while
following), and per source the epoch and seq of the last batch applied, so a router can tell a
fresh answer from a stale one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from consumers import Follower
from swa_es.service.match_query import HashQuery, Query
from swa_es.service.views import StandardViews

EXACT: Final = "exact"
UNKNOWN: Final = "unknown"
PAGE_SIZE_MISMATCH: Final = "page_size_mismatch"

SourceAnswers = dict[str, dict[str, Any]]


class FollowerRouting:
    """``RoutingBackend`` over one follower and its standard views."""

    def __init__(self, follower: Follower, views: StandardViews) -> None:
        self.follower = follower
        self.views = views
        # answers are few distinct values (the native match shares equal ones): one dict each
        self._answer_dicts: dict[tuple[int | None, int | None], dict[str, Any]] = {}
        self._as_of_key: tuple[int, ...] | None = None
        self._as_of: dict[str, Any] = {}

    def match(self, token_ids: Sequence[int], extra_key: str | None) -> SourceAnswers:
        """Per source holding part of the prompt (or unknown): cached and usable tokens."""
        found = self.views.prefix.match(token_ids, extra_key)
        # The native match shares one instance between sources with equal answers: convert
        # each distinct one once, then map the sources onto them in C (no Python per source).
        matches = list(found.values())
        ids = list(map(id, matches))
        distinct = dict(zip(ids, matches, strict=True))
        converted = {key: self._known(m.full_tokens, m.swa_tokens) for key, m in distinct.items()}
        return dict(zip(found, map(converted.__getitem__, ids), strict=True))

    def match_hashes(self, block_hashes: Sequence[int], page_size: int) -> SourceAnswers:
        """``match`` for a prompt given as the chained block hashes of its pages.

        The same walk as the native token match, over each source's blocks: a page held as a
        tombstone counts for the held length and limits the usable one by the SWA rule.
        """
        replicas = self.views.replicas
        store = replicas.store
        answers: SourceAnswers = {}
        for source in store.sources():
            if store.diverged(source) is not None:
                answers[source] = self._known(None, None)
                continue
            if store.block_count(source) == 0:
                continue
            meta = replicas.meta_of(source)
            if meta is None:
                answers[source] = self._known(None, None)
                continue
            if meta.page_size != page_size:
                answers[source] = {
                    "cached_tokens": None,
                    "usable_tokens": None,
                    "state": PAGE_SIZE_MISMATCH,
                }
                continue
            swa = SwaTrack(meta.sliding_window_size, page_size)
            pages = 0
            for block_hash in block_hashes:
                resident = store.residency(source, block_hash)
                if resident is None:
                    break
                if not resident:
                    swa.tombstone(pages)
                pages += 1
            if pages:
                usable = swa.usable(pages) * page_size if meta.swa_events else None
                answers[source] = self._known(pages * page_size, usable)
        return answers

    def answer(self, query: Query) -> SourceAnswers:
        """The per-source answers to one query of either form."""
        if isinstance(query, HashQuery):
            return self.match_hashes(query.block_hashes, query.page_size)
        return self.match(query.token_ids, query.extra_key)

    def as_of(self) -> dict[str, Any]:
        """What the answers reflect: log position, lag, and each source's last batch."""
        follower = self.follower
        metrics = follower.metrics
        key = (
            metrics.records_read,
            metrics.lag_records,
            metrics.divergences,
            id(follower.cursors),
        )
        if key != self._as_of_key:
            cursors = follower.cursors
            sources: dict[str, dict[str, Any]] = {}
            for source in cursors.sources():
                cursor = cursors.get(source)
                assert cursor is not None
                sources[source] = {"epoch": cursor.epoch, "seq": cursor.seq}
            self._as_of = {
                "position": {str(p): o for p, o in follower.position.offsets.items()},
                "lag_records": metrics.lag_records,
                "sources": sources,
            }
            self._as_of_key = key
        return self._as_of

    def sources(self) -> SourceAnswers:
        """Per source: epoch, seq, blocks, tombstones, lag and digest state."""
        lag_records = self.follower.metrics.lag_records
        answers: SourceAnswers = {}
        for source in self.views.replicas.sources():
            tree = self.views.replicas[source]
            cursor = self.follower.cursors.get(source)
            meta = tree.meta
            answers[source] = {
                "epoch": None if cursor is None else cursor.epoch,
                "seq": None if cursor is None else cursor.seq,
                "state": EXACT if tree.diverged is None else UNKNOWN,
                "diverged": tree.diverged,
                "blocks": len(tree),
                "tombstones": tree.tombstone_count,
                "swa_events": True if meta is None else meta.swa_events,
                "digest": tree.state_digest(),
                "digest_verifiable": meta is not None and meta.digest_verifiable,
                "lag_records": lag_records,
            }
        return answers

    def _known(self, cached: int | None, usable: int | None) -> dict[str, Any]:
        key = (cached, usable)
        shared = self._answer_dicts.get(key)
        if shared is None:
            if len(self._answer_dicts) > 4096:
                self._answer_dicts.clear()
            shared = self._answer_dicts[key] = {
                "cached_tokens": cached,
                "usable_tokens": usable,
                "state": EXACT if cached is not None else UNKNOWN,
            }
        return shared


class SwaTrack:
    """The SWA rule for one source fed only its tombstones, as the native walk applies it.

    After a tombstone at page ``t``, a prefix of ``p`` pages is usable again once
    ``p >= t + 1 + ceil(window / page_size)``; before the first tombstone every prefix is.
    """

    __slots__ = ("_last_tombstone", "_pages_needed", "_usable_before")

    def __init__(self, window: int, page_size: int) -> None:
        self._pages_needed = -(-window // page_size)
        self._last_tombstone: int | None = None
        self._usable_before = 0

    def usable(self, pages: int) -> int:
        """The longest usable prefix (in pages) of the first ``pages`` pages."""
        last = self._last_tombstone
        if last is None or pages >= last + 1 + self._pages_needed:
            return pages
        return self._usable_before

    def tombstone(self, page: int) -> None:
        """Page ``page`` (0-based) is held as a tombstone."""
        self._usable_before = self.usable(page)
        self._last_tombstone = page
