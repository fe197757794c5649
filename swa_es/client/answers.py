"""Typed answers of the routing API, read from its JSON replies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EXACT = "exact"


@dataclass(frozen=True, slots=True)
class SourceMatch:
    """What one source holds of a prompt.

    ``cached_tokens``: the longest prefix it holds; ``usable_tokens``: the longest one usable
    under the sliding-window rule (None when its stream does not report tombstones). Both are
    None when ``state`` is not ``"exact"``: ``"unknown"`` (the follower lost the source's
    stream) or ``"page_size_mismatch"`` (block hashes of another page size were sent).
    """

    cached_tokens: int | None
    usable_tokens: int | None
    state: str

    @property
    def exact(self) -> bool:
        """Whether the lengths are known."""
        return self.state == EXACT


@dataclass(frozen=True, slots=True)
class SourcePosition:
    """The last batch of a source the answer reflects: its epoch and seq."""

    epoch: str
    seq: int


@dataclass(frozen=True, slots=True)
class AsOf:
    """What an answer reflects: the follower's read position in the log (partition -> next
    offset), how many records it was behind the log's end when last checked, and per source the
    last batch applied."""

    position: dict[int, int]
    lag_records: int
    sources: dict[str, SourcePosition]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> AsOf:
        """From the ``as_of`` object of a reply."""
        return cls(
            {int(partition): int(offset) for partition, offset in raw["position"].items()},
            int(raw["lag_records"]),
            {
                name: SourcePosition(cursor["epoch"], int(cursor["seq"]))
                for name, cursor in raw["sources"].items()
            },
        )


@dataclass(frozen=True, slots=True)
class MatchAnswer:
    """Per source, what it holds of one prompt (sources holding none of it are absent)."""

    sources: dict[str, SourceMatch]

    def best(self) -> tuple[str, SourceMatch] | None:
        """The exact source with the longest usable prefix (then the longest cached one; ties
        go to the first named), or None when no source holds any of it."""
        best: tuple[str, SourceMatch] | None = None
        best_key = (-1, -1)
        for name, found in self.sources.items():
            if not found.exact:
                continue
            key = (found.usable_tokens or 0, found.cached_tokens or 0)
            if key > best_key:
                best, best_key = (name, found), key
        return best


@dataclass(frozen=True, slots=True)
class MatchReply:
    """The answer to one prompt and what it is as of."""

    answer: MatchAnswer
    as_of: AsOf

    @property
    def sources(self) -> dict[str, SourceMatch]:
        """The answer's sources."""
        return self.answer.sources


@dataclass(frozen=True, slots=True)
class BatchReply:
    """The answers to a batch of prompts, in the order sent, and what they are as of."""

    answers: list[MatchAnswer]
    as_of: AsOf


def parse_sources(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, SourceMatch]:
    """The ``sources`` object of an answer (equal answers share one ``SourceMatch``)."""
    made: dict[tuple[Any, ...], SourceMatch] = {}
    sources: dict[str, SourceMatch] = {}
    for name, found in raw.items():
        key = (found["cached_tokens"], found["usable_tokens"], found["state"])
        value = made.get(key)
        if value is None:
            value = made[key] = SourceMatch(*key)
        sources[name] = value
    return sources


def parse_match_reply(raw: Mapping[str, Any]) -> MatchReply:
    """A reply to one prompt."""
    return MatchReply(MatchAnswer(parse_sources(raw["sources"])), AsOf.parse(raw["as_of"]))


def parse_batch_reply(raw: Mapping[str, Any]) -> BatchReply:
    """A reply to a batch."""
    answers = [MatchAnswer(parse_sources(answer["sources"])) for answer in raw["answers"]]
    return BatchReply(answers, AsOf.parse(raw["as_of"]))
