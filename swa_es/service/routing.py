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

Every per-source answer carries ``tiers``: ``{medium: {"cached_tokens", "usable_tokens"}}`` for
``"GPU"`` (equal to the top-level lengths) and every lower tier the source has reported
(``"CPU"``, ``"STORAGE"``, ``"DISK"``, ... as its engine names them). A lower tier's
``cached_tokens`` counts the tokens it holds without a gap continuing after the GPU hit (what
the engine would load from it); its ``usable_tokens`` is ``null`` (engines do not report SWA
residency per lower tier). Where the top-level lengths are ``null``, so is every tier's.

Every answer carries ``as_of``: the follower's read position in the log (partition -> next
offset), its lag behind the log's end in records (refreshed about once a second while
following), and per source the epoch and seq of the last batch applied, so a router can tell a
fresh answer from a stale one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from cache.events import BatchMeta
from consumers import Follower
from swa_es.client.answers import DEGRADED, EXACT, GPU, OFFLINE, PAGE_SIZE_MISMATCH, UNKNOWN
from swa_es.client.packed_answers import STATE_CODES, AnswerRows
from swa_es.service.match_query import HashQuery, Query
from swa_es.service.views import StandardViews

STATES: Final = (EXACT, DEGRADED, OFFLINE, UNKNOWN)
"""Every state a source is in; a match by block hashes may also answer ``PAGE_SIZE_MISMATCH``."""

SourceAnswers = dict[str, dict[str, Any]]
_HASHES_RANGE: Final = "block_hashes: every hash must be a signed 64-bit int"


class _Liveness:
    """Every source's liveness at one moment: the follower's clock ``now``, when each source
    was last heard on it, who is offline, and whether the follower lags past the bound."""

    __slots__ = ("heard_at", "lagging", "now", "offline")

    def __init__(
        self, now: float, heard_at: dict[str, float], offline: Mapping[str, str], lagging: bool
    ) -> None:
        self.now = now
        self.heard_at = heard_at
        self.offline = offline
        self.lagging = lagging

    def heard_s(self, source: str) -> float | None:
        """Seconds since ``source`` was last heard (None: never)."""
        at = self.heard_at.get(source)
        return None if at is None else max(0.0, self.now - at)

    def state(self, source: str, diverged: bool) -> str:
        """The state of ``source`` (see the module docstring)."""
        if source in self.offline:
            return OFFLINE
        if diverged:
            return UNKNOWN
        return DEGRADED if self.lagging else EXACT


def null_tiers(media: Sequence[str]) -> dict[str, dict[str, None]]:
    """The ``tiers`` of an answer with null lengths: ``"GPU"`` and each of ``media``."""
    return {medium: {"cached_tokens": None, "usable_tokens": None} for medium in (GPU, *media)}


def _null_answer(state: str, heard_s: float | None, media: Sequence[str]) -> dict[str, Any]:
    """A source's answer with null lengths in ``state``."""
    return {
        "cached_tokens": None,
        "usable_tokens": None,
        "state": state,
        "last_heard_s": heard_s,
        "tiers": null_tiers(media),
    }


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
        self._other_sizes: list[str] = []
        self._as_of: dict[str, Any] = {}
        self._as_of_source: dict[str, Any] | None = None
        self._as_of_json = b""

    def liveness(self) -> _Liveness:
        """Every source's liveness now."""
        bound = self.degraded_lag_records
        lagging = bound is not None and self.follower.metrics.lag_records > bound
        now, heard_at, offline = self.follower.heard_and_offline()
        return _Liveness(now, heard_at, offline, lagging)

    def match(self, token_ids: Sequence[int], extra_key: str | None) -> SourceAnswers:
        """Per source holding part of the prompt (or unknown, or offline): cached and usable
        tokens, state and ``last_heard_s``. (The hot path: the native store builds the answers
        of the sources it holds, with no Python code per source.)"""
        live = self.liveness()
        answers: SourceAnswers = self.views.replicas.store.match_answers(
            token_ids, extra_key, live.now, live.heard_at, *self._states(live), live.offline
        )
        return self._with_offline(answers, live)

    def match_hashes(self, block_hashes: Sequence[int], page_size: int) -> SourceAnswers:
        """``match`` for a prompt given as the chained block hashes of its pages of
        ``page_size`` tokens: the native index walks the hashes as given, with no hashing. A
        source holding pages of another size answers ``PAGE_SIZE_MISMATCH``."""
        live = self.liveness()
        try:
            answers: SourceAnswers = self.views.replicas.store.match_hashes_answers(
                list(block_hashes),
                page_size,
                live.now,
                live.heard_at,
                *self._states(live),
                live.offline,
            )
        except OverflowError:
            raise ValueError(_HASHES_RANGE) from None
        for source in self._mismatched(page_size, live):
            answers[source] = _null_answer(
                PAGE_SIZE_MISMATCH, live.heard_s(source), self.tier_media(source)
            )
        return self._with_offline(answers, live)

    def answer_rows(self, query: Query) -> AnswerRows:
        """``answer`` as the rows of the binary reply (``swa_es.client.packed_answers``): the
        same answers, packed by the native store with no Python code per source it holds."""
        live = self.liveness()
        known_state, unknown_state = self._states(live)
        known, unknown = STATE_CODES[known_state], STATE_CODES[unknown_state]
        store = self.views.replicas.store
        now, heard_at, offline = live.now, live.heard_at, live.offline
        if isinstance(query, HashQuery):
            try:
                packed = store.match_hashes_rows(
                    list(query.block_hashes),
                    query.page_size,
                    now,
                    heard_at,
                    known,
                    unknown,
                    offline,
                )
            except OverflowError:
                raise ValueError(_HASHES_RANGE) from None
            rows = AnswerRows.from_native(packed)
            for source in self._mismatched(query.page_size, live):
                rows.add(source, PAGE_SIZE_MISMATCH, live.heard_s(source), self.tier_media(source))
        else:
            packed = store.match_rows(
                query.token_ids, query.extra_key, now, heard_at, known, unknown, offline
            )
            rows = AnswerRows.from_native(packed)
        for source in offline:
            rows.add(source, OFFLINE, live.heard_s(source), self.tier_media(source))
        return rows

    def as_of_json(self) -> bytes:
        """``as_of()`` as JSON text (made again only when ``as_of()`` changes)."""
        as_of = self.as_of()
        if as_of is not self._as_of_source:
            self._as_of_json = orjson.dumps(as_of)
            self._as_of_source = as_of
        return self._as_of_json

    def _mismatched(self, page_size: int, live: _Liveness) -> list[str]:
        """The sources answering ``PAGE_SIZE_MISMATCH`` to pages of ``page_size``."""
        return [s for s in self._other_page_sizes(page_size) if s not in live.offline]

    def tier_media(self, source: str) -> list[str]:
        """The lower tiers ``source`` has reported, in the order first reported (none for a
        source the replicas never saw)."""
        store = self.views.replicas.store
        if not store.has_source(source):
            return []
        return [medium for medium, _ in store.tiers(source)]

    @staticmethod
    def _states(live: _Liveness) -> tuple[str, str]:
        """The state of a source holding part of a prompt, and of one whose state is unknown."""
        return DEGRADED if live.lagging else EXACT, UNKNOWN

    def _with_offline(self, answers: SourceAnswers, live: _Liveness) -> SourceAnswers:
        """``answers`` and every offline source's answer (null lengths)."""
        for source in live.offline:
            answers[source] = _null_answer(OFFLINE, live.heard_s(source), self.tier_media(source))
        return answers

    def _state_key(self) -> tuple[int, ...]:
        """Changes whenever the follower applies a record, marks a divergence or restores."""
        metrics = self.follower.metrics
        return (metrics.records_read, metrics.divergences, id(self.follower.cursors))

    def _other_page_sizes(self, page_size: int) -> list[str]:
        """The trusted sources holding blocks of another page size than ``page_size`` (kept
        until the follower's state changes)."""
        key = (*self._state_key(), page_size)
        if key != self._kinds_key:
            replicas = self.views.replicas
            store = replicas.store
            self._other_sizes = [
                source
                for source in store.sources()
                if store.diverged(source) is None
                and (store.block_count(source) or any(n for _, n in store.tiers(source)))
                and (meta := replicas.meta_of(source)) is not None
                and meta.page_size != page_size
            ]
            self._kinds_key = key
        return self._other_sizes

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
        """Per source: epoch, seq, state, liveness, blocks (and blocks per tier: ``"GPU"``, then
        each lower tier reported), tombstones, lag and digest state. The lag is the follower's
        (``lag_records``, ``lag_s``: how far it is behind the log's end, every source's bound),
        the same as its ``swa_es_follower_lag_records`` and ``_lag_seconds`` metrics."""
        metrics = self.follower.metrics
        lag_records, lag_s = metrics.lag_records, metrics.lag_s
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
                "last_heard_s": live.heard_s(source),
                "offline": live.offline.get(source),
                "diverged": tree.diverged,
                "blocks": len(tree),
                "tiers": {GPU: len(tree), **dict(self.views.replicas.store.tiers(source))},
                "tombstones": tree.tombstone_count,
                "swa_events": True if meta is None else meta.swa_events,
                "swa_residency": swa_residency(meta),
                "digest": tree.state_digest(),
                "digest_verifiable": meta is not None and meta.digest_verifiable,
                "lag_records": lag_records,
                "lag_s": lag_s,
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


def swa_residency(meta: BatchMeta | None) -> str:
    """``"events"`` when the source's stream reports SWA residency (usable lengths answered),
    else ``"none: <reason>"``: the reason its producer wrote in ``meta.swa_residency`` (a
    bridged engine), or the generic one."""
    if meta is None:
        return "none: no epoch meta read for this source yet"
    if meta.swa_events:
        return "events"
    reason = meta.get("swa_residency")
    if isinstance(reason, str) and reason.startswith("none: "):
        return reason
    return "none: the stream carries no SWA residency events (meta swa_events false)"
