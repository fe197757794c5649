"""The cross-worker prefix index: for a request, how much of it each source has cached.

``match`` runs in the native core, in one walk of the request for all sources: it hashes the
request's pages once per page size (the same chained hashes the primaries put in their events),
lazily, and looks each page up once in a holder index (block hash -> the sources holding it, and
which of them hold it as a tombstone) that the ``ReplicaSet``'s store keeps in step with every
batch once a ``PrefixIndex`` reads it. Per source it reports the longest held prefix and the
longest one usable under the SWA rule (the rule of ``cache.events.swa_rule``, the tree's own;
the core's twin is held equal to it by a differential test), so the usable length is what that
source's own ``match_prefix`` would return. The result objects are made natively too.

Unknown is never a guess: a diverged source (or one whose meta is missing) is reported with
``PrefixMatch.unknown()`` (both lengths None); a source whose stream carries no tombstone events
(meta ``"swa_events": false``) reports its held length with ``swa_tokens`` None. Sources holding
none of the prefix are absent.

Cost: hashing is the floor (each page chains onto the previous one's digest, so a prompt's pages
are hashed one after the other). The store keeps the page digests of the last few prompts it
matched (8, per namespace and page size) and reuses those of the whole pages a new prompt shares
with the closest one: a system prompt, earlier turns of a conversation, a retried request cost no
hashing. A list of ints is read through CPython's public C API, a buffer of integers
(``array.array``, a NumPy vector: the fastest) in bulk; answers and errors are those of reading
the ids one by one. Sources with equal answers share one (immutable) ``PrefixMatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from cache.events import EventBatch, WireBatch
from consumers.errors import ViewStateError
from consumers.views.replica import ReplicaSet
from consumers.views.view import LaneRole


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Matched lengths in tokens; both None when the source's state is unknown (diverged);
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


class PrefixIndex:
    """The ``prefix_index`` view: answers from the follower's ``ReplicaSet``.

    It keeps no state of its own: ``replicas`` must be one of the same follower's views (the
    follower checks), which applies every batch and every divergence; this view's snapshot is
    empty.
    """

    lane_role: ClassVar[LaneRole | None] = LaneRole.READS

    def __init__(self, replicas: ReplicaSet, *, name: str = "prefix_index") -> None:
        self._name = name
        self._replicas = replicas
        replicas.enable_prefix_index()

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

    def apply_wire(self, batch: WireBatch) -> None:
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
        return self._replicas.store.match_into(token_ids, extra_key, PrefixMatch)

    def match_hashes(self, block_hashes: Sequence[int], page_size: int) -> dict[str, PrefixMatch]:
        """``match`` for a prompt given as the block hashes of its pages of ``page_size`` tokens
        (chained as docs/design.md §4 says; a namespace is in the hashes already), walked without
        hashing. Sources of another page size are absent (their blocks are other pages);
        ``ValueError`` for a page size below 1 or a hash that is not a signed 64-bit int."""
        store = self._replicas.store
        try:
            return store.match_hashes_into(list(block_hashes), page_size, PrefixMatch)
        except OverflowError:
            raise ValueError("block_hashes: every hash must be a signed 64-bit int") from None
