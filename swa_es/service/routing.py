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
from enum import Enum
from typing import Any, Final

from cache.events import chain_block_hashes, namespace_prior
from consumers import Follower
from swa_es.service.match_query import HashQuery, Query
from swa_es.service.views import StandardViews

EXACT: Final = "exact"
UNKNOWN: Final = "unknown"
PAGE_SIZE_MISMATCH: Final = "page_size_mismatch"

SourceAnswers = dict[str, dict[str, Any]]
_NO_NAMESPACE: Final = namespace_prior(None)


class _Kind(Enum):
    """How a source takes part in a match by block hashes."""

    WALK = "walk"
    UNKNOWN = "unknown"
    OTHER_PAGE_SIZE = "other_page_size"


class FollowerRouting:
    """``RoutingBackend`` over one follower and its standard views."""

    def __init__(self, follower: Follower, views: StandardViews) -> None:
        self.follower = follower
        self.views = views
        # answers are few distinct values (the native match shares equal ones): one dict each
        self._answer_dicts: dict[tuple[int | None, int | None], dict[str, Any]] = {}
        self._mismatch = {"cached_tokens": None, "usable_tokens": None, "state": PAGE_SIZE_MISMATCH}
        self._as_of_key: tuple[int, ...] | None = None
        self._kinds_key: tuple[int, ...] | None = None
        self._kinds: dict[str, _Kind] = {}
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

        The native index walks tokens, so the prompt's tokens are read back from the replicas
        holding its pages and hashed again: when they give exactly these hashes (a prompt
        without a namespace), the native token walk answers, which walks the same hashes. When
        they do not (a namespaced prompt), ``walk_hashes`` answers, source by source.
        """
        kinds = self._source_kinds(page_size)
        tokens = self._tokens_of(block_hashes, page_size, kinds)
        if tokens is None:
            return self.walk_hashes(block_hashes, page_size)
        answers = self.match(tokens, None) if tokens else {}
        for source, kind in kinds.items():
            if kind is _Kind.OTHER_PAGE_SIZE:
                answers[source] = self._mismatch
            elif kind is _Kind.UNKNOWN:
                answers[source] = self._known(None, None)
        return answers

    def walk_hashes(self, block_hashes: Sequence[int], page_size: int) -> SourceAnswers:
        """``match_hashes`` by a walk over each source's blocks: a page held as a tombstone
        counts for the held length and limits the usable one by the SWA rule, as in the native
        walk. One lookup per source and page."""
        replicas = self.views.replicas
        store = replicas.store
        answers: SourceAnswers = {}
        for source, kind in self._source_kinds(page_size).items():
            if kind is _Kind.UNKNOWN:
                answers[source] = self._known(None, None)
                continue
            if kind is _Kind.OTHER_PAGE_SIZE:
                answers[source] = self._mismatch
                continue
            meta = replicas.meta_of(source)
            assert meta is not None
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

    def _state_key(self) -> tuple[int, ...]:
        """Changes whenever the follower applies a record, marks a divergence or restores."""
        metrics = self.follower.metrics
        return (metrics.records_read, metrics.divergences, id(self.follower.cursors))

    def _source_kinds(self, page_size: int) -> dict[str, _Kind]:
        """Per source holding blocks: whether a walk of pages of ``page_size`` applies (kept
        until the follower's state changes)."""
        key = (*self._state_key(), page_size)
        if key != self._kinds_key:
            self._kinds = self._read_source_kinds(page_size)
            self._kinds_key = key
        return self._kinds

    def _read_source_kinds(self, page_size: int) -> dict[str, _Kind]:
        replicas = self.views.replicas
        store = replicas.store
        kinds: dict[str, _Kind] = {}
        for source in store.sources():
            if store.diverged(source) is not None:
                kinds[source] = _Kind.UNKNOWN
            elif store.block_count(source):
                meta = replicas.meta_of(source)
                if meta is None:
                    kinds[source] = _Kind.UNKNOWN
                elif meta.page_size != page_size:
                    kinds[source] = _Kind.OTHER_PAGE_SIZE
                else:
                    kinds[source] = _Kind.WALK
        return kinds

    def _tokens_of(
        self, block_hashes: Sequence[int], page_size: int, kinds: dict[str, _Kind]
    ) -> list[int] | None:
        """The tokens of the leading pages some source holds, read back from the replicas;
        None when they do not hash to ``block_hashes`` without a namespace."""
        store = self.views.replicas.store
        holders = [source for source, kind in kinds.items() if kind is _Kind.WALK]
        tokens: list[int] = []
        if not holders:
            return tokens
        current = holders[0]
        for block_hash in block_hashes:
            found = store.block(current, block_hash)
            if found is None:
                for source in holders:
                    found = store.block(source, block_hash)
                    if found is not None:
                        current = source
                        break
                else:
                    break
            page = found[1]
            if len(page) != page_size:
                return None
            tokens.extend(page)
        pages = len(tokens) // page_size
        rehashed = chain_block_hashes(_NO_NAMESPACE, tokens, page_size)
        return tokens if rehashed == list(block_hashes[:pages]) else None

    def answer(self, query: Query) -> SourceAnswers:
        """The per-source answers to one query of either form."""
        if isinstance(query, HashQuery):
            return self.match_hashes(query.block_hashes, query.page_size)
        return self.match(query.token_ids, query.extra_key)

    def as_of(self) -> dict[str, Any]:
        """What the answers reflect: log position, lag, and each source's last batch."""
        follower = self.follower
        metrics = follower.metrics
        key = (*self._state_key(), metrics.lag_records)
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
