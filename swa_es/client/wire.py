"""Request bodies of ``POST /v1/match`` as the client sends them (the cheapest form of each)."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

import msgpack
import orjson

from swa_es.client.answers import AsOf
from swa_es.client.packed_answers import PACKED_ANSWERS

MATCH_PATH: Final = "/v1/match"
OCTET_STREAM: Final = "application/octet-stream"
MSGPACK: Final = "application/msgpack"
_LITTLE_ENDIAN: Final = sys.byteorder == "little"


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt of a batch: token ids in namespace ``extra_key``."""

    token_ids: Sequence[int]
    extra_key: str | None = None


@dataclass(frozen=True, slots=True)
class HashedPrompt:
    """One prompt of a batch as the chained block hashes of its pages of ``page_size``."""

    block_hashes: Sequence[int]
    page_size: int


@dataclass(frozen=True, slots=True)
class Request:
    """A ready-to-send ``POST``: target (path and query), content type, body, and the type of
    reply asked for (``Accept``; None: the server's default, JSON)."""

    target: str
    content_type: str
    body: bytes
    accept: str | None = None


def _packed(typecode: str, values: Sequence[int]) -> array[int]:
    """``values`` as an array of ``typecode`` (a list through ``fromlist``: about half the cost
    of the constructor's item-by-item path for a prompt's ids)."""
    if type(values) is list:
        packed = array(typecode)
        packed.fromlist(values)
        return packed
    return array(typecode, values)


def u32_bytes(token_ids: Sequence[int] | bytes) -> bytes:
    """Token ids as little-endian u32 (bytes are taken as already encoded)."""
    if isinstance(token_ids, bytes | bytearray | memoryview):
        return bytes(token_ids)
    try:
        packed = _packed("I", token_ids)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"token ids must be ints in [0, 2**32): {exc}") from None
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def i64_bytes(block_hashes: Sequence[int]) -> bytes:
    """Block hashes as little-endian i64."""
    try:
        packed = _packed("q", block_hashes)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"block hashes must be signed 64-bit ints: {exc}") from None
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def match_request(token_ids: Sequence[int] | bytes, extra_key: str | None) -> Request:
    """One prompt as a binary body (``extra_key`` in the query string), asking for the binary
    reply."""
    target = MATCH_PATH
    if extra_key is not None:
        target += "?" + urlencode({"extra_key": extra_key})
    return Request(target, OCTET_STREAM, u32_bytes(token_ids), PACKED_ANSWERS)


def hashes_request(block_hashes: Sequence[int], page_size: int) -> Request:
    """One prompt as block hashes, a binary body (``page_size`` in the query string), asking for
    the binary reply."""
    if type(page_size) is not int or page_size <= 0:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    target = f"{MATCH_PATH}?page_size={page_size}"
    return Request(target, OCTET_STREAM, i64_bytes(block_hashes), PACKED_ANSWERS)


def batch_request(prompts: Sequence[Prompt | HashedPrompt]) -> Request:
    """Several prompts as one msgpack body (ids and hashes as binary strings)."""
    items: list[dict[str, Any]] = []
    for prompt in prompts:
        if isinstance(prompt, HashedPrompt):
            items.append(
                {"block_hashes": i64_bytes(prompt.block_hashes), "page_size": prompt.page_size}
            )
        else:
            items.append({"token_ids": u32_bytes(prompt.token_ids), "extra_key": prompt.extra_key})
    return Request(MATCH_PATH, MSGPACK, msgpack.packb({"prompts": items}))


class AsOfReader:
    """Parses ``as_of`` objects (or their JSON text), reusing the last one while the follower
    has not moved."""

    __slots__ = ("_last", "_raw")

    def __init__(self) -> None:
        self._raw: Any = None
        self._last: AsOf | None = None

    def __call__(self, raw: Any) -> AsOf:
        """The ``AsOf`` of ``raw``: the object, or its JSON text (bytes, as the binary answer
        carries it)."""
        if self._last is None or raw != self._raw:
            self._last = AsOf.parse(loads(raw) if isinstance(raw, bytes) else raw)
            self._raw = raw
        return self._last


def loads(body: bytes) -> Any:
    """A JSON reply."""
    return orjson.loads(body)
