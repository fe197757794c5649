"""Typed answers of the routing API, read from its JSON replies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EXACT = "exact"
DEGRADED = "degraded"
OFFLINE = "offline"
UNKNOWN = "unknown"
PAGE_SIZE_MISMATCH = "page_size_mismatch"
KNOWN_STATES = frozenset({EXACT, DEGRADED})
"""The states whose lengths are known (degraded: the follower lags, they may be stale)."""


GPU = "GPU"
"""The device tier's name in ``SourceMatch.tiers``."""


@dataclass(frozen=True, slots=True)
class TierMatch:
    """What one tier of a source holds of a prompt: ``cached_tokens`` (on ``"GPU"`` the
    top-level length; on a lower tier the tokens it holds without a gap continuing after the GPU
    hit, what the engine would load from it) and ``usable_tokens`` (on a lower tier always None:
    engines do not report SWA residency per lower tier). Both None where the source's state is
    not known."""

    cached_tokens: int | None
    usable_tokens: int | None


@dataclass(frozen=True, slots=True)
class SourceMatch:
    """What one source holds of a prompt.

    ``cached_tokens``: the longest prefix it holds; ``usable_tokens``: the longest one usable
    under the sliding-window rule (None when its stream does not report tombstones). ``state``
    is ``"exact"``, ``"degraded"`` (known, but the follower lags the log: maybe stale),
    ``"offline"`` (the source stopped or went unheard), ``"unknown"`` (the follower lost the
    source's stream) or ``"page_size_mismatch"`` (block hashes of another page size were
    sent); both lengths are None in the last three. ``last_heard_s``: seconds since the
    follower last heard from the source (None: not said); it is left out of comparisons, as
    it changes with every answer. ``tiers``: per medium (``"GPU"`` first, then each lower tier
    the source reported, named as its engine names them), what that tier holds (``TierMatch``);
    empty when the reply carried none. It is left out of comparisons too (a ``SourceMatch``
    compares by its GPU lengths and state, as before tiers existed): compare ``tiers`` itself.
    """

    cached_tokens: int | None
    usable_tokens: int | None
    state: str
    last_heard_s: float | None = field(default=None, compare=False)
    tiers: Mapping[str, TierMatch] = field(default_factory=dict, compare=False)

    def tier_tokens(self, medium: str) -> int:
        """The tokens tier ``medium`` holds of the prompt (0 when the source did not report
        that tier or its lengths are not known)."""
        found = self.tiers.get(medium)
        return 0 if found is None or found.cached_tokens is None else found.cached_tokens

    def weighted_tokens(self, weights: Mapping[str, float]) -> float:
        """A router's cascade score: each tier's tokens times its weight in ``weights`` (a tier
        without a weight counts 0), e.g. ``{"GPU": 1.0, "CPU": 0.75, "DISK": 0.25}``. The
        tiers continue each other, so the sum weighs every prompt token once, by where it is
        held nearest the GPU."""
        return sum(
            weight * self.tier_tokens(medium)
            for medium, weight in weights.items()
            if medium in self.tiers
        )

    @property
    def exact(self) -> bool:
        """Whether the lengths are known and current (state ``"exact"``)."""
        return self.state == EXACT

    @property
    def known(self) -> bool:
        """Whether the lengths are known (``"exact"`` or ``"degraded"``)."""
        return self.state in KNOWN_STATES

    @property
    def offline(self) -> bool:
        """Whether the source is offline (stopped, or unheard past the follower's timeout)."""
        return self.state == OFFLINE


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
        """The source with known lengths (exact or degraded) and the longest usable prefix
        (then the longest cached one; ties go to the first named), or None when no such source
        holds any of it. Offline and unknown sources are never offered."""
        best: tuple[str, SourceMatch] | None = None
        best_key = (-1, -1)
        for name, found in self.sources.items():
            if not found.known:
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


def parse_tiers(raw: Mapping[str, Mapping[str, Any]] | None) -> dict[str, TierMatch]:
    """The ``tiers`` object of a source's answer (an empty dict when absent)."""
    if not raw:
        return {}
    return {
        medium: TierMatch(found["cached_tokens"], found["usable_tokens"])
        for medium, found in raw.items()
    }


def _tiers_key(raw: Mapping[str, Mapping[str, Any]] | None) -> tuple[Any, ...]:
    if not raw:
        return ()
    return tuple(
        (medium, found["cached_tokens"], found["usable_tokens"]) for medium, found in raw.items()
    )


def parse_sources(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, SourceMatch]:
    """The ``sources`` object of an answer (equal answers share one ``SourceMatch``)."""
    made: dict[tuple[Any, ...], SourceMatch] = {}
    sources: dict[str, SourceMatch] = {}
    for name, found in raw.items():
        tiers = found.get("tiers")
        key = (
            found["cached_tokens"],
            found["usable_tokens"],
            found["state"],
            found.get("last_heard_s"),
            _tiers_key(tiers),
        )
        value = made.get(key)
        if value is None:
            value = made[key] = SourceMatch(*key[:4], parse_tiers(tiers))
        sources[name] = value
    return sources


def parse_match_reply(raw: Mapping[str, Any]) -> MatchReply:
    """A reply to one prompt."""
    return MatchReply(MatchAnswer(parse_sources(raw["sources"])), AsOf.parse(raw["as_of"]))


def parse_batch_reply(raw: Mapping[str, Any]) -> BatchReply:
    """A reply to a batch."""
    answers = [MatchAnswer(parse_sources(answer["sources"])) for answer in raw["answers"]]
    return BatchReply(answers, AsOf.parse(raw["as_of"]))
