"""The binary reply of ``POST /v1/match`` for one prompt: the per-source answers as fixed-size
rows, which a client reads without parsing an object per source.

A client asks for it with ``Accept: application/vnd.swa-es.answers`` (a server that does not
know it answers JSON, told apart by the reply's ``Content-Type``). The reply, little-endian:

- a header, ``HEADER``: ``MAGIC``, then the byte lengths of the five sections that follow;
- ``names``: a JSON array of the source names, row ``i`` answering ``names[i]``;
- ``media``: a JSON array of the lower tiers' names that tier entries point into;
- ``rows``: one ``ROW`` a distinct answer: cached tokens, usable tokens (-1 for null), seconds
  since last heard (NaN for null), the state's index in ``STATES``, and how many lower tiers
  follow;
- ``tiers``: one ``TIER`` a lower tier of each row, in row order: the medium's index in
  ``media``, cached and usable tokens (-1 for null). The GPU tier is the row's own lengths;
- ``index``: one ``INDEX`` a source, in the order of ``names``: the row answering it (sources
  with equal answers and no lower tier share a row: a fleet mostly holds a prompt to a few
  lengths);
- ``as_of``: the JSON ``as_of`` object, as in the JSON reply.

The answers are the JSON reply's, field for field (``read`` gives the same ``SourceMatch``
values as parsing the JSON). The native store writes the rows of the sources it holds
(``AnswerRows.from_native``); the service adds the rest (offline sources, other page sizes)
with ``AnswerRows.add``.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import orjson

from cache.errors import SwaEsError
from swa_es.client.answers import (
    DEGRADED,
    EXACT,
    GPU,
    OFFLINE,
    PAGE_SIZE_MISMATCH,
    UNKNOWN,
    SourceMatch,
    TierMatch,
)

PACKED_ANSWERS: Final = "application/vnd.swa-es.answers"
"""The media type of the binary reply (asked for in ``Accept``, named in ``Content-Type``)."""
MAGIC: Final = b"SWA\x01"
"""The reply's first bytes: the layout's name and version."""
STATES: Final = (EXACT, DEGRADED, OFFLINE, UNKNOWN, PAGE_SIZE_MISMATCH)
"""Every state a row can carry, by code."""
STATE_CODES: Final = {state: code for code, state in enumerate(STATES)}
HEADER: Final = struct.Struct("<4sIIIIII")
ROW: Final = struct.Struct("<qqdBB")
"""One source's row (the native store writes the same: ``_native.ANSWER_ROW_FORMAT``)."""
TIER: Final = struct.Struct("<Hqq")
"""One lower tier's entry (``_native.ANSWER_TIER_FORMAT``)."""
INDEX: Final = "I"
"""One source's row index, an ``array`` type code (``_native.ANSWER_INDEX_FORMAT``, ``<I``)."""
_NULL: Final = -1
_INDEX: Final = struct.Struct("<" + INDEX)
if array(INDEX).itemsize != _INDEX.size:  # C's unsigned int is 4 bytes wherever Python runs
    raise ImportError(f"array type {INDEX!r} is not {_INDEX.size} bytes here")


class PackedAnswersError(SwaEsError, ValueError):
    """A binary reply that does not follow the layout (``where``: the part that is wrong)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"binary answers, {where}: {reason}")
        self.where = where
        self.reason = reason


def _length(value: int | None) -> int:
    return _NULL if value is None else value


@dataclass(slots=True)
class AnswerRows:
    """The answers of one prompt as the reply's sections, while the service builds them."""

    names: list[str] = field(default_factory=list)
    media: list[str] = field(default_factory=list)
    rows: bytes = b""
    tiers: bytes = b""
    index: bytes = b""

    @classmethod
    def from_native(cls, packed: tuple[list[str], list[str], bytes, bytes, bytes]) -> AnswerRows:
        """The rows the native store wrote (``match_rows``, ``match_hashes_rows``)."""
        return cls(*packed)

    def add(
        self,
        source: str,
        state: str,
        last_heard_s: float | None,
        media: Sequence[str],
        cached_tokens: int | None = None,
        usable_tokens: int | None = None,
    ) -> None:
        """One more row: ``source`` in ``state``, holding each lower tier of ``media`` with
        null lengths (as the service answers sources the native walk leaves out)."""
        heard = math.nan if last_heard_s is None else last_heard_s
        row = ROW.pack(
            _length(cached_tokens), _length(usable_tokens), heard, STATE_CODES[state], len(media)
        )
        entries = []
        for medium in media:
            if medium not in self.media:
                self.media.append(medium)
            entries.append(TIER.pack(self.media.index(medium), _NULL, _NULL))
        self.names.append(source)
        self.index += _INDEX.pack(len(self.rows) // ROW.size)
        self.rows += row
        self.tiers += b"".join(entries)

    def frame(self, as_of_json: bytes) -> bytes:
        """The whole reply body, ``as_of_json`` last."""
        names = orjson.dumps(self.names)
        media = orjson.dumps(self.media)
        sections = (names, media, self.rows, self.tiers, self.index, as_of_json)
        head = HEADER.pack(MAGIC, *map(len, sections))
        return b"".join((head, *sections))


def _optional(value: int) -> int | None:
    return None if value == _NULL else value


def _sections(body: bytes) -> tuple[bytes, ...]:
    if len(body) < HEADER.size:
        raise PackedAnswersError("header", f"{len(body)} bytes, expected at least {HEADER.size}")
    magic, *lengths = HEADER.unpack_from(body)
    if magic != MAGIC:
        raise PackedAnswersError("header", f"starts {magic!r}, expected {MAGIC!r}")
    if HEADER.size + sum(lengths) != len(body):
        raise PackedAnswersError(
            "header", f"sections of {sum(lengths)} bytes in a body of {len(body)}"
        )
    parts, at = [], HEADER.size
    for length in lengths:
        parts.append(body[at : at + length])
        at += length
    return tuple(parts)


def _strings(section: bytes, where: str) -> list[str]:
    try:
        values = orjson.loads(section)
        if type(values) is not list:
            raise TypeError
        "".join(values)  # a TypeError unless every item is a str (one pass, in C)
    except orjson.JSONDecodeError as exc:
        raise PackedAnswersError(where, f"not JSON: {exc}") from None
    except TypeError:
        raise PackedAnswersError(where, "not a JSON array of strings") from None
    return values


def _source_match(
    row: tuple[int, int, float, int, int], entries: Iterator[tuple[int, int, int]], media: list[str]
) -> SourceMatch:
    """The ``SourceMatch`` of one row, taking its lower tiers' entries from ``entries``."""
    cached, usable, heard, code, lower = row
    cached_tokens, usable_tokens = _optional(cached), _optional(usable)
    tiers = {GPU: TierMatch(cached_tokens, usable_tokens)}
    for _ in range(lower):
        medium, tier_cached, tier_usable = next(entries)
        tiers[media[medium]] = TierMatch(_optional(tier_cached), _optional(tier_usable))
    heard_s = None if heard != heard else heard  # NaN: null
    return SourceMatch(cached_tokens, usable_tokens, STATES[code], heard_s, tiers)


class AnswersReader:
    """Reads binary replies, keeping the last names table read: a router's follower answers with
    the same sources reply after reply, and a table equal to the last one is not parsed again.
    One per client (not thread-safe)."""

    __slots__ = ("_names", "_names_json")

    def __init__(self) -> None:
        self._names_json = b""
        self._names: list[str] = []

    def read(self, body: bytes) -> tuple[dict[str, SourceMatch], bytes]:
        """The per-source answers of a binary reply, and its ``as_of`` JSON text.

        Sources sharing a row share one ``SourceMatch``. ``PackedAnswersError`` names what
        breaks the layout."""
        names_json, media_json, rows, tiers, index, as_of = _sections(body)
        if names_json != self._names_json:
            self._names = _strings(names_json, "names")
            self._names_json = names_json
        names = self._names
        media = _strings(media_json, "media") if media_json != b"[]" else []
        if len(rows) % ROW.size:
            raise PackedAnswersError("rows", f"{len(rows)} bytes, not whole rows")
        if len(tiers) % TIER.size:
            raise PackedAnswersError("tiers", f"{len(tiers)} bytes, not whole entries")
        if len(index) != _INDEX.size * len(names):
            raise PackedAnswersError("index", f"{len(index)} bytes for {len(names)} names")
        entries = TIER.iter_unpack(tiers)
        try:
            answers = [_source_match(row, entries, media) for row in ROW.iter_unpack(rows)]
            matches = [answers[at] for at in _row_index(index)]
        except StopIteration:
            raise PackedAnswersError("tiers", "fewer entries than the rows count") from None
        except IndexError:
            raise PackedAnswersError("rows", "a row, state or medium index out of range") from None
        if next(entries, None) is not None:
            raise PackedAnswersError("tiers", "more entries than the rows count")
        return dict(zip(names, matches, strict=True)), as_of


def read(body: bytes) -> tuple[dict[str, SourceMatch], bytes]:
    """``AnswersReader().read(body)``: one reply read on its own."""
    return AnswersReader().read(body)


def _row_index(index: bytes) -> array[int]:
    """The index section as ints (little-endian on the wire)."""
    values = array(INDEX, index)
    if sys.byteorder != "little":
        values.byteswap()
    return values
