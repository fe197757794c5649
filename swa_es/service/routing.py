"""The routing API's answers, read from a follower's views (``/v1/match``, ``/v1/sources``).

Every answer names the source's ``state`` (defined for users in docs/routing.md):

- ``"exact"``: the follower holds the source's stream without a gap and is not lagging;
- ``"degraded"``: as exact, but the follower is more than ``degraded_lag_records`` records
  behind the log's end, so the lengths may be stale;
- ``"offline"``: the source marked itself offline (a clean stop, a bridge whose engine is
  gone) or was unheard for the follower's ``source_timeout_s``; lengths ``null``, and it is
  answered whether or not it holds any of the prompt;
- ``"unknown"``: the follower does not hold the stream (diverged: a gap, an unknown epoch
  start, a digest mismatch); lengths ``null``, never guessed.

``last_heard_s`` is how long ago the follower last heard from the source (a batch or a
heartbeat, on its own clock; null for a source it holds no cursor for). ``usable_tokens`` is
also ``null`` for a source whose stream carries no tombstones (an engine bridged from ZMQ: meta
``swa_events`` false).
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
from consumers.follower import SourceLiveness
from swa_es.service.match_query import HashQuery, Query
from swa_es.service.views import StandardViews

EXACT: Final = "exact"
DEGRADED: Final = "degraded"
OFFLINE: Final = "offline"
UNKNOWN: Final = "unknown"
STATES: Final = (EXACT, DEGRADED, OFFLINE, UNKNOWN)
"""Every state a source is in; a match by block hashes may also answer ``PAGE_SIZE_MISMATCH``."""
PAGE_SIZE_MISMATCH: Final = "page_size_mismatch"

SourceAnswers = dict[str, dict[str, Any]]
Lengths = tuple[int | None, int | None]
"""A source's cached and usable tokens before liveness is applied."""
_NO_NAMESPACE: Final = namespace_prior(None)
_MISMATCH: Final[Lengths] = (-1, -1)
"""The lengths of a source whose pages are of another size (never real lengths)."""
_UNKNOWN: Final[Lengths] = (None, None)


class _Liveness:
    """Every source's liveness at one moment: who is offline, when each was heard, and
    whether the follower lags past the bound."""

    __slots__ = ("heard", "lagging", "offline")

    def __init__(self, found: dict[str, SourceLiveness], lagging: bool) -> None:
        self.heard = {source: round(live.last_heard_s, 3) for source, live in found.items()}
        self.offline = {source: live.offline for source, live in found.items() if live.offline}
        self.lagging = lagging

    def state(self, source: str, diverged: bool) -> str:
        """The state of ``source`` (see the module docstring)."""
        if source in self.offline:
            return OFFLINE
        if diverged:
            return UNKNOWN
        return DEGRADED if self.lagging else EXACT


class _Kind(Enum):
    """How a source takes part in a match by block hashes."""

    WALK = "walk"
    UNKNOWN = "unknown"
    OTHER_PAGE_SIZE = "other_page_size"


class FollowerRouting:
    """``RoutingBackend`` over one follower and its standard views."""

    def __init__(
        self, follower: Follower, views: StandardViews, *, degraded_lag_records: int | None = None
    ) -> None:
        self.follower = follower
        self.views = views
        self.degraded_lag_records = degraded_lag_records
        self._as_of_key: tuple[int, ...] | None = None
        self._kinds_key: tuple[int, ...] | None = None
        self._kinds: dict[str, _Kind] = {}
        self._as_of: dict[str, Any] = {}

    def liveness(self) -> _Liveness:
        """Every source's liveness now."""
        bound = self.degraded_lag_records
        lagging = bound is not None and self.follower.metrics.lag_records > bound
        return _Liveness(self.follower.liveness(), lagging)

    def _finish(self, found: dict[str, Lengths]) -> SourceAnswers:
        """The answers: lengths with each source's state and ``last_heard_s``; every offline
        source answers offline with null lengths, whether or not it holds any of the prompt."""
        live = self.liveness()
        heard, offline, lagging = live.heard, live.offline, live.lagging
        answers: SourceAnswers = {}
        for source, (cached, usable) in found.items():
            if source in offline:
                continue
            if (cached, usable) == _MISMATCH:
                state, cached, usable = PAGE_SIZE_MISMATCH, None, None
            elif cached is None:
                state = UNKNOWN
            else:
                state = DEGRADED if lagging else EXACT
            answers[source] = {
                "cached_tokens": cached,
                "usable_tokens": usable,
                "state": state,
                "last_heard_s": heard.get(source),
            }
        for source in offline:
            answers[source] = {
                "cached_tokens": None,
                "usable_tokens": None,
                "state": OFFLINE,
                "last_heard_s": heard[source],
            }
        return answers

    def match(self, token_ids: Sequence[int], extra_key: str | None) -> SourceAnswers:
        """Per source holding part of the prompt (or unknown, or offline): cached and usable
        tokens, state and ``last_heard_s``."""
        return self._finish(self._match_lengths(token_ids, extra_key))

    def _match_lengths(self, token_ids: Sequence[int], extra_key: str | None) -> dict[str, Lengths]:
        found = self.views.prefix.match(token_ids, extra_key)
        # The native match shares one instance between sources with equal answers: convert
        # each distinct one once, then map the sources onto them in C (no Python per source).
        matches = list(found.values())
        ids = list(map(id, matches))
        distinct = dict(zip(ids, matches, strict=True))
        converted = {key: (m.full_tokens, m.swa_tokens) for key, m in distinct.items()}
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
        found = self._match_lengths(tokens, None) if tokens else {}
        for source, kind in kinds.items():
            if kind is _Kind.OTHER_PAGE_SIZE:
                found[source] = _MISMATCH
            elif kind is _Kind.UNKNOWN:
                found[source] = _UNKNOWN
        return self._finish(found)

    def walk_hashes(self, block_hashes: Sequence[int], page_size: int) -> SourceAnswers:
        """``match_hashes`` by a walk over each source's blocks: a page held as a tombstone
        counts for the held length and limits the usable one by the SWA rule, as in the native
        walk. One lookup per source and page."""
        replicas = self.views.replicas
        store = replicas.store
        found: dict[str, Lengths] = {}
        for source, kind in self._source_kinds(page_size).items():
            if kind is _Kind.UNKNOWN:
                found[source] = _UNKNOWN
                continue
            if kind is _Kind.OTHER_PAGE_SIZE:
                found[source] = _MISMATCH
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
                found[source] = (pages * page_size, usable)
        return self._finish(found)

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
        """Per source: epoch, seq, state, liveness, blocks, tombstones, lag and digest state."""
        lag_records = self.follower.metrics.lag_records
        live = self.liveness()
        answers: SourceAnswers = {}
        for source in self.views.replicas.sources():
            tree = self.views.replicas[source]
            cursor = self.follower.cursors.get(source)
            meta = tree.meta
            answers[source] = {
                "epoch": None if cursor is None else cursor.epoch,
                "seq": None if cursor is None else cursor.seq,
                "state": live.state(source, tree.diverged is not None),
                "last_heard_s": live.heard.get(source),
                "offline": live.offline.get(source),
                "diverged": tree.diverged,
                "blocks": len(tree),
                "tombstones": tree.tombstone_count,
                "swa_events": True if meta is None else meta.swa_events,
                "digest": tree.state_digest(),
                "digest_verifiable": meta is not None and meta.digest_verifiable,
                "lag_records": lag_records,
            }
        return answers

    def source_states(self) -> dict[str, str]:
        """Every source's state now (for metrics)."""
        live = self.liveness()
        diverged = self.follower.cursors.diverged()
        return {
            source: live.state(source, source in diverged)
            for source in self.follower.cursors.sources()
        }


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
