"""The cross-worker prefix index: for a request, how much of it each source has cached.

``match`` hashes the request's pages once per page size (the same chained hashes the primaries
put in their events) and walks each source's replica. Per source it reports the longest held
prefix and the longest one usable under the SWA rule (``cache.events.swa_rule``, the rule the
tree's own ``match_prefix`` applies), so the usable length is what that source would return.

Unknown is never a guess: a diverged source (or one whose meta is missing) is reported with
``PrefixMatch.unknown()`` (both lengths None). Sources holding none of the prefix are absent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cache.events import EventBatch, block_hashes_of, chain_page_digests, namespace_prior
from cache.events.swa_rule import usable_prefix
from consumers.errors import ViewStateError
from consumers.views.replica import ReplicaSet, ReplicaTree


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Matched lengths in tokens; both None when the source's state is unknown (diverged)."""

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


def _pages_held(
    tree: ReplicaTree, hashes: Sequence[int], page_size: int
) -> Iterator[tuple[int, bool]]:
    """(page size, resident) for each page of the chain ``hashes`` that ``tree`` holds."""
    for block_hash in hashes:
        resident = tree.residency(block_hash)
        if resident is None:
            return
        yield page_size, resident


def match_pages(
    tree: ReplicaTree, hashes: Sequence[int], sliding_window_size: int
) -> tuple[int, int]:
    """(held pages, SWA-usable pages) of the chain ``hashes`` in ``tree``."""
    page_size = tree.meta.page_size if tree.meta is not None else 1
    return usable_prefix(_pages_held(tree, hashes, page_size), sliding_window_size)


class PrefixIndex:
    """The ``prefix_index`` view: answers from the follower's ``ReplicaSet``.

    It keeps no state of its own: ``replicas`` must be one of the same follower's views (the
    follower checks), which applies every batch and every divergence; this view's snapshot is
    empty.
    """

    def __init__(self, replicas: ReplicaSet, *, name: str = "prefix_index") -> None:
        self._name = name
        self._replicas = replicas

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    @property
    def replicas(self) -> ReplicaSet:
        """The replicas this index answers from."""
        return self._replicas

    def apply(self, batch: EventBatch) -> None:
        """Nothing to do: the ``ReplicaSet`` applies the batch."""

    def mark_diverged(self, source: str, reason: str) -> None:
        """Nothing to do: the ``ReplicaSet`` records the divergence and this index reads it."""

    def snapshot(self) -> bytes:
        """Nothing: the state is the ``ReplicaSet``'s."""
        return b""

    def load(self, data: bytes) -> None:
        """Accept the empty state ``snapshot`` wrote."""
        if data:
            raise ViewStateError(self._name, "a prefix index has no state of its own")

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
                result[source] = PrefixMatch(held * page_size, usable * page_size)
        return result
