"""The standard set of follower views: replicas, and a prefix index and stats sharing them."""

from __future__ import annotations

from dataclasses import dataclass

from consumers import PrefixIndex, ReplicaSet, Stats
from consumers.views.view import View


@dataclass(frozen=True, slots=True)
class StandardViews:
    """One ``ReplicaSet`` and the ``PrefixIndex`` and ``Stats`` that read it."""

    replicas: ReplicaSet
    prefix: PrefixIndex
    stats: Stats

    @classmethod
    def create(cls, *, keep_tokens: bool = False) -> StandardViews:
        """Fresh, empty views; the replicas keep token ids only when ``keep_tokens`` (only the
        stream out reads them: ``swa-es follow --zmq-publish``)."""
        replicas = ReplicaSet(keep_tokens=keep_tokens)
        return cls(replicas, PrefixIndex(replicas), Stats(replicas))

    @property
    def all(self) -> list[View]:
        """The views in the order a follower applies them."""
        return [self.replicas, self.prefix, self.stats]
