"""Turn a cache's events into the numbered ``EventBatch`` records of one source.

A ``BatchBuilder`` owns the ``(epoch, seq)`` numbering of one source: each epoch has a fresh
random id, ``seq`` counts its batches from 0, the epoch's first batch carries ``meta`` and begins
with ``AllBlocksCleared``, and the primary's state digest rides on the last batch of an epoch's
opening and then on every ``digest_every_batches``-th batch. A token-free source's builder
(``token_ids=False``) writes every ``BlockStored`` without its token ids and says so in ``meta``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockStored,
    Event,
    EventBatch,
)
from swa_es.publish.config import (
    BATCH_OVERHEAD_BYTES,
    DEFAULT_DIGEST_EVERY_BATCHES,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_EVENTS_PER_BATCH,
    at_least,
    positive_int,
)


class PublishedCache(Protocol):
    """The cache as a publisher sees it (``cache.SWARadixCache`` satisfies it)."""

    @property
    def page_size(self) -> int:
        """Tokens per page."""
        ...

    @property
    def sliding_window_size(self) -> int:
        """Tokens of the attention window."""
        ...

    @property
    def device(self) -> Any:
        """Where the KV pools live (a ``torch.device`` or its name)."""
        ...

    def take_events(self) -> list[Event]:
        """Every event since the last call, in order; clears the buffer."""
        ...

    def snapshot_events(self) -> list[Event]:
        """The whole current tree as events: parents before children, tombstones included."""
        ...

    def state_digest(self) -> str:
        """The order-independent digest of the current tree."""
        ...


def cache_meta(cache: PublishedCache, *, digest_every_batches: int) -> BatchMeta:
    """The ``meta`` a consumer needs to interpret this cache's batches (it names the digest
    algorithm, so a follower knows whether it can check the in-band digests)."""
    return BatchMeta(
        page_size=int(cache.page_size),
        sliding_window_size=int(cache.sliding_window_size),
        digest_alg=DIGEST_ALGORITHM,
        device=str(cache.device),
        producer="swa-es",
        digest_every_batches=digest_every_batches,
    )


def new_epoch_id() -> str:
    """A fresh random epoch id (uuid4, hex)."""
    return uuid.uuid4().hex


def encoded_size_bound(event: Event) -> int:
    """An upper bound of the bytes ``event`` takes in an encoded batch.

    Generous per field: a token id is at most 10 digits plus a comma, a hash 20 plus a comma, a
    string escapes to at most 6 bytes per character, and the keys fit in 160 bytes."""
    hashes = getattr(event, "block_hashes", ())
    size = 160 + 21 * len(hashes)
    if isinstance(event, BlockStored):
        size += 11 * len(event.token_ids) + 6 * len(event.medium or "")
    return size


def without_token_ids(events: Iterable[Event]) -> tuple[Event, ...]:
    """``events`` with every ``BlockStored``'s token ids withheld (``token_ids=()``; its hashes,
    parent, block size and pages unchanged): what a token-free source writes."""
    return tuple(
        replace(event, token_ids=()) if isinstance(event, BlockStored) else event
        for event in events
    )


def split_events(
    events: Sequence[Event], *, max_events: int, max_bytes: int
) -> list[Sequence[Event]]:
    """Consecutive chunks of ``events``, each at most ``max_events`` long and, by the bound of
    ``encoded_size_bound``, at most ``max_bytes`` encoded (an oversized event goes alone)."""
    chunks: list[Sequence[Event]] = []
    start = size = 0
    for index, event in enumerate(events):
        cost = encoded_size_bound(event)
        if index > start and (index - start >= max_events or size + cost > max_bytes):
            chunks.append(events[start:index])
            start, size = index, 0
        size += cost
    if start < len(events):
        chunks.append(events[start:])
    return chunks


class BatchBuilder:
    """Numbers the batches of one source across epochs.

    ``token_ids=False`` (or a ``meta`` whose ``token_ids`` is False) makes the source token-free:
    ``meta`` says ``token_ids: false`` and every batch's stores are written without their token
    ids (``without_token_ids``); ``token_ids`` tells a native encoder to do the same."""

    def __init__(
        self,
        source: str,
        meta: Mapping[str, Any],
        *,
        digest_every_batches: int = DEFAULT_DIGEST_EVERY_BATCHES,
        max_events_per_batch: int = DEFAULT_MAX_EVENTS_PER_BATCH,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        token_ids: bool = True,
        clock: Callable[[], float] = time.time,
        epoch_ids: Callable[[], str] = new_epoch_id,
    ) -> None:
        positive_int("digest_every_batches", digest_every_batches)
        positive_int("max_events_per_batch", max_events_per_batch)
        at_least("max_batch_bytes", max_batch_bytes, BATCH_OVERHEAD_BYTES)
        self.source = source
        typed = meta if isinstance(meta, BatchMeta) else BatchMeta.from_dict(meta)
        self.token_ids = token_ids and typed.token_ids
        """Whether the stores carry their token ids (False: a token-free source)."""
        self.meta = typed if self.token_ids else replace(typed, token_ids=False)
        self.max_batch_bytes = max_batch_bytes
        self.digest_every_batches = digest_every_batches
        self.max_events_per_batch = max_events_per_batch
        self._clock = clock
        self._epoch_ids = epoch_ids
        self._epoch = ""
        self._next_seq = 0
        self._since_digest = 0

    @property
    def epoch(self) -> str:
        """The current epoch id (``""`` before the first ``open_epoch``)."""
        return self._epoch

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next batch of the current epoch will get."""
        return self._next_seq

    @property
    def max_split_bytes(self) -> int:
        """The bound ``split_events`` cuts a batch's events by (the envelope set aside)."""
        return self.max_batch_bytes - BATCH_OVERHEAD_BYTES

    def now(self) -> float:
        """The batch timestamp now (the builder's clock)."""
        return self._clock()

    def _split(self, events: Sequence[Event]) -> list[Sequence[Event]]:
        return split_events(
            events, max_events=self.max_events_per_batch, max_bytes=self.max_split_bytes
        )

    def new_epoch(self) -> str:
        """Start a new epoch: a fresh id, seqs from 0, the digest cadence from 0. Its opening
        (``AllBlocksCleared`` and the tree, the digest on the last batch) takes the first seqs:
        ``open_epoch`` builds it, or a native encoder writes it and reports ``opened``."""
        self._epoch = self._epoch_ids()
        self._next_seq = 0
        self._since_digest = 0
        return self._epoch

    def opened(self, batches: int) -> None:
        """The new epoch's opening was written as ``batches`` batches (seq 0 onwards)."""
        self._next_seq += batches

    def reserve(self, batches: int) -> tuple[int, bool]:
        """Number the ``batches`` batches of one step: the seq of the first, and whether the
        digest cadence puts the digest on the last of them."""
        if not self._epoch:
            raise RuntimeError("open_epoch() must come before the first step")
        first = self._next_seq
        self._next_seq += batches
        self._since_digest += batches
        due = batches > 0 and self._since_digest >= self.digest_every_batches
        if due:
            self._since_digest = 0
        return first, due

    def _batch(
        self, seq: int, events: Sequence[Event], *, digest: str | None, meta: BatchMeta | None
    ) -> EventBatch:
        return EventBatch(
            source=self.source,
            epoch=self._epoch,
            seq=seq,
            ts=self._clock(),
            events=tuple(events) if self.token_ids else without_token_ids(events),
            digest=digest,
            meta=meta,
        )

    def open_epoch(self, snapshot: Sequence[Event], digest: str) -> list[EventBatch]:
        """Start a new epoch: ``AllBlocksCleared`` then ``snapshot``, in as many batches as
        ``max_events_per_batch`` and ``max_batch_bytes`` need; ``meta`` on the first, ``digest``
        on the last."""
        self.new_epoch()
        chunks = self._split([AllBlocksCleared(), *snapshot])
        self.opened(len(chunks))
        last = len(chunks) - 1
        return [
            self._batch(
                index,
                chunk,
                digest=digest if index == last else None,
                meta=self.meta if index == 0 else None,
            )
            for index, chunk in enumerate(chunks)
        ]

    def open_unknown_epoch(self) -> list[EventBatch]:
        """Start a new epoch whose state is unknown: one empty batch at seq 0, with ``meta`` and
        without ``AllBlocksCleared``, so followers mark the source diverged (not guessed) until
        an epoch that does begin with ``AllBlocksCleared``."""
        self.new_epoch()
        self.opened(1)
        return [self._batch(0, (), digest=None, meta=self.meta)]

    def gap_batch(self) -> EventBatch:
        """An empty batch one seq past the next one: followers see a seq gap and mark the
        source diverged until the next epoch (events were lost upstream)."""
        if not self._epoch:
            raise RuntimeError("open_epoch() must come before a gap")
        seq = self._next_seq + 1
        self._next_seq += 2
        return self._batch(seq, (), digest=None, meta=None)

    def step_batches(self, events: Sequence[Event], digest: Callable[[], str]) -> list[EventBatch]:
        """The batches of one step's events (none for an empty step: nothing changed).

        ``digest`` is called only when the cadence puts a digest on this step's last batch; a
        step split into several batches carries it on the last one, where it is true.
        """
        if not self._epoch:
            raise RuntimeError("open_epoch() must come before the first step")
        chunks = self._split(events)
        first, due = self.reserve(len(chunks))
        last = len(chunks) - 1
        return [
            self._batch(
                first + index, chunk, digest=digest() if due and index == last else None, meta=None
            )
            for index, chunk in enumerate(chunks)
        ]
