"""The cross-worker prefix index: for a request, how much of it each source has cached.

``match`` hashes the request's pages once per page size (the same chained hashes the primaries
put in their events) and walks each source's replica. Per source it reports the longest held
prefix and the longest one usable under the SWA rule (DESIGN §3): a match may end at a page
boundary only if the path has no tombstone, or at least ``sliding_window_size`` tokens follow
the last tombstone on it. That is the length the source's own ``cache.match_prefix`` returns.

Unknown is never a guess: a diverged source (or one whose meta is missing) is reported with
``PrefixMatch.unknown()`` (both lengths None); a source whose stream carries no tombstones
(meta ``"swa_events": false``) reports its held length with ``swa_tokens`` None. Sources holding none of the prefix are absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cache.events import EventBatch, block_hashes_of, chain_page_digests, namespace_prior
from consumers.errors import ViewStateError
from consumers.replica import ReplicaSet, ReplicaTree


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Matched lengths in tokens; both None when the source's state is unknown (diverged),
    ``swa_tokens`` alone None when the source does not report tombstones."""

    full_tokens: int | None
    swa_tokens: int | None

    @classmethod
    def unknown(cls) -> PrefixMatch:
        """The answer for a source whose state is unknown."""
        return cls(None, None)

    @property
    def known(self) -> bool:
        """False for a diverged source."""
        return self.full_tokens is not None


def match_pages(
    tree: ReplicaTree, hashes: Sequence[int], sliding_window_size: int
) -> tuple[int, int]:
    """(held pages, SWA-usable pages) of the chain ``hashes`` in ``tree``."""
    page_size = tree.meta.page_size if tree.meta is not None else 1
    since_tombstone: int | None = None  # None: no tombstone on the path so far
    held = usable = 0
    for block_hash in hashes:
        resident = tree.residency(block_hash)
        if resident is None:
            break
        held += 1
        if not resident:
            since_tombstone = 0
        elif since_tombstone is not None:
            since_tombstone += page_size
        if since_tombstone is None or since_tombstone >= sliding_window_size:
            usable = held
    return held, usable


class PrefixIndex:
    """The ``prefix_index`` view.

    ``PrefixIndex()`` keeps its own replicas; ``PrefixIndex(replicas)`` reads a ``ReplicaSet``
    that is itself one of the follower's views (no second copy; this view then has no state of
    its own and its snapshot is empty).
    """

    def __init__(self, replicas: ReplicaSet | None = None, *, name: str = "prefix_index") -> None:
        self._name = name
        self._shared = replicas
        self._replicas = replicas if replicas is not None else ReplicaSet(name=name)

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    @property
    def shared_replicas(self) -> ReplicaSet | None:
        """The ``ReplicaSet`` this index reads, when it does not keep its own."""
        return self._shared

    @property
    def replicas(self) -> ReplicaSet:
        """The replicas this index answers from."""
        return self._replicas

    def apply(self, batch: EventBatch) -> None:
        """Apply one batch (nothing to do when the replicas are shared)."""
        if self._shared is None:
            self._replicas.apply(batch)

    def mark_diverged(self, source: str, reason: str) -> None:
        """Answer unknown for ``source`` until it resyncs."""
        self._replicas.mark_diverged(source, reason)

    def source_digest(self, source: str) -> str | None:
        """The digest of ``source`` as held here (None when shared: the ReplicaSet checks)."""
        return None if self._shared is not None else self._replicas.source_digest(source)

    def snapshot(self) -> bytes:
        """Own replicas as bytes, or nothing when shared."""
        return b"" if self._shared is not None else self._replicas.snapshot()

    def load(self, data: bytes) -> None:
        """Replace the state with what ``snapshot`` wrote."""
        if self._shared is None:
            self._replicas.load(data)
        elif data:
            raise ViewStateError(self._name, "a shared prefix index has no state of its own")

    def match(
        self, token_ids: Sequence[int], extra_key: str | None = None
    ) -> dict[str, PrefixMatch]:
        """Per source, the held and the SWA-usable prefix lengths of ``token_ids``."""
        prior = namespace_prior(extra_key)
        chains: dict[int, list[int]] = {}
        result: dict[str, PrefixMatch] = {}
        for source in self._replicas:
            tree = self._replicas[source]
            if tree.diverged is not None:
                result[source] = PrefixMatch.unknown()
                continue
            if not len(tree):
                continue
            if tree.meta is None:
                result[source] = PrefixMatch.unknown()
                continue
            page_size = tree.meta.page_size
            hashes = chains.get(page_size)
            if hashes is None:
                digests = chain_page_digests(prior, token_ids, page_size)
                hashes = chains[page_size] = block_hashes_of(digests)
            held, usable = match_pages(tree, hashes, tree.meta.sliding_window_size)
            if held:
                swa_tokens = usable * page_size if tree.meta.swa_events else None
                result[source] = PrefixMatch(held * page_size, swa_tokens)
        return result
