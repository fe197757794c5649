"""The bodies ``POST /v1/match`` accepts, parsed into queries (no HTTP here).

Three encodings of the same queries, chosen by ``Content-Type``:

- ``application/json`` (also the default when no type is given) and ``application/msgpack``:
  an object. One prompt is ``{"token_ids": [int...], "extra_key": str|null}``, or, when the
  caller already hashed its pages, ``{"block_hashes": [int...], "page_size": int}``; a batch is
  ``{"prompts": [<one prompt>...]}``. In msgpack, ``token_ids`` may also be a ``bin`` of
  little-endian u32 and ``block_hashes`` a ``bin`` of little-endian i64.
- ``application/octet-stream``: one prompt as raw little-endian u32 token ids; ``extra_key``
  (UTF-8, percent-encoded) in the query string. With ``page_size=N`` in the query string the
  body is little-endian i64 block hashes of pages of ``N`` tokens instead.

Every problem raises ``BadRequestError`` with a message naming what is wrong and where, and
``UnsupportedMediaError`` for a type none of these.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

import msgpack
import orjson

from cache.errors import SwaEsError

MAX_TOKEN_ID: Final = 0xFFFFFFFF
MIN_BLOCK_HASH: Final = -(1 << 63)
MAX_BLOCK_HASH: Final = (1 << 63) - 1
MAX_PAGE_SIZE: Final = (1 << 32) - 1
MAX_BATCH_PROMPTS: Final = 1024
"""The most prompts one batch may carry."""

JSON: Final = "application/json"
MSGPACK: Final = "application/msgpack"
OCTET_STREAM: Final = "application/octet-stream"
MEDIA_TYPES: Final = {
    JSON: JSON,
    MSGPACK: MSGPACK,
    "application/x-msgpack": MSGPACK,
    "application/vnd.msgpack": MSGPACK,
    OCTET_STREAM: OCTET_STREAM,
}

_LITTLE_ENDIAN: Final = sys.byteorder == "little"
_PROMPT_FIELDS: Final = {"token_ids", "extra_key", "block_hashes", "page_size"}
_BINARY_PARAMETERS: Final = {"extra_key", "page_size"}


class BadRequestError(SwaEsError):
    """A request body the API cannot serve; the message goes back with status 400."""


class UnsupportedMediaError(SwaEsError):
    """A ``Content-Type`` the API does not read; the message goes back with status 415."""


@dataclass(frozen=True, slots=True)
class TokenQuery:
    """A prompt as token ids (a list of ints or a buffer of u32) in namespace ``extra_key``."""

    token_ids: Sequence[int]
    extra_key: str | None = None


@dataclass(frozen=True, slots=True)
class HashQuery:
    """A prompt as the chained block hashes of its pages of ``page_size`` tokens."""

    block_hashes: Sequence[int]
    page_size: int


Query = TokenQuery | HashQuery


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """The queries of one body, and whether it was a batch (answered as a list)."""

    queries: list[Query]
    batch: bool


def media_type(content_type: str | None) -> str:
    """The canonical media type of a ``Content-Type`` value (JSON when absent)."""
    if not content_type:
        return JSON
    exact = MEDIA_TYPES.get(content_type)  # the common case: a bare type, as clients send it
    if exact is not None:
        return exact
    bare = content_type.split(";", 1)[0].strip().lower()
    canonical = MEDIA_TYPES.get(bare)
    if canonical is None:
        raise UnsupportedMediaError(
            f"Content-Type {bare!r} is not served (use {JSON}, {MSGPACK} or {OCTET_STREAM})"
        )
    return canonical


def parse_body(content_type: str | None, body: bytes, query_string: bytes = b"") -> ParsedBody:
    """The queries of a ``POST /v1/match`` body of ``content_type`` with ``query_string``."""
    kind = media_type(content_type)
    if kind == OCTET_STREAM:
        return ParsedBody([_binary_query(body, query_string)], batch=False)
    if query_string:
        raise BadRequestError(f"query parameters apply only to {OCTET_STREAM} bodies")
    return _object_queries(*decode_object_body(kind, body))


def decode_object_body(kind: str, body: bytes) -> tuple[Any, str]:
    """The object a JSON or msgpack body encodes (``kind``: its media type, ``JSON`` or
    msgpack's) and the encoding's name, for errors; a body that does not decode is a
    ``BadRequestError`` saying why."""
    if kind == JSON:
        try:
            return orjson.loads(body), "JSON"
        except orjson.JSONDecodeError as exc:
            raise BadRequestError(f"body is not JSON: {exc}") from None
    try:
        raw = msgpack.unpackb(body, raw=False, strict_map_key=True, max_bin_len=len(body))
    except msgpack.StackError:
        raise BadRequestError("body is not msgpack: nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"body is not msgpack: a string is not UTF-8 ({exc})") from None
    except (ValueError, msgpack.ExtraData, msgpack.FormatError) as exc:
        raise BadRequestError(f"body is not msgpack: {exc or type(exc).__name__}") from None
    return raw, "msgpack"


def _object_queries(raw: Any, encoding: str) -> ParsedBody:
    if type(raw) is not dict:
        raise BadRequestError(f"body must be a {encoding} object")
    if "prompts" not in raw:
        return ParsedBody([_prompt(raw, "")], batch=False)
    if len(raw) != 1:
        other = sorted(str(key) for key in raw if key != "prompts")[0]
        raise BadRequestError(f"unknown field {other!r} beside prompts")
    prompts = raw["prompts"]
    if type(prompts) is not list:
        raise BadRequestError("prompts must be a list of prompt objects")
    if not prompts:
        raise BadRequestError("prompts is empty")
    if len(prompts) > MAX_BATCH_PROMPTS:
        raise BadRequestError(f"{len(prompts)} prompts exceed the limit of {MAX_BATCH_PROMPTS}")
    queries = []
    for index, prompt in enumerate(prompts):
        where = f"prompts[{index}]."
        if type(prompt) is not dict:
            raise BadRequestError(f"prompts[{index}] must be an object")
        queries.append(_prompt(prompt, where))
    return ParsedBody(queries, batch=True)


def _prompt(raw: dict[Any, Any], where: str) -> Query:
    unknown = sorted(str(key) for key in raw if key not in _PROMPT_FIELDS)
    if unknown:
        raise BadRequestError(
            f"unknown field {where}{unknown[0]!r} (expected token_ids and extra_key, "
            "or block_hashes and page_size)"
        )
    if "block_hashes" in raw:
        for field in ("token_ids", "extra_key"):
            if field in raw:
                raise BadRequestError(
                    f"{where}{field} does not go with block_hashes (the hashes carry the namespace)"
                )
        if "page_size" not in raw:
            raise BadRequestError(f"{where}page_size is required with block_hashes")
        return HashQuery(
            _block_hashes(raw["block_hashes"], f"{where}block_hashes"),
            _page_size(raw["page_size"], f"{where}page_size"),
        )
    if "page_size" in raw:
        raise BadRequestError(f"{where}page_size goes only with block_hashes")
    if "token_ids" not in raw:
        raise BadRequestError(f"{where}token_ids (or block_hashes) is required")
    extra_key = raw.get("extra_key")
    if extra_key is not None and type(extra_key) is not str:
        raise BadRequestError(f"{where}extra_key must be a string or null")
    return TokenQuery(_token_ids(raw["token_ids"], f"{where}token_ids"), extra_key)


def _token_ids(value: Any, name: str) -> Sequence[int]:
    if type(value) is bytes:
        return _u32_buffer(value, name)
    if type(value) is not list:
        raise BadRequestError(f"{name} must be a list of ints")
    _check_ints(value, name, 0, MAX_TOKEN_ID, "an int in [0, 2**32)")
    return value


def _block_hashes(value: Any, name: str) -> Sequence[int]:
    if type(value) is bytes:
        return _i64_buffer(value, name)
    if type(value) is not list:
        raise BadRequestError(f"{name} must be a list of ints")
    _check_ints(value, name, MIN_BLOCK_HASH, MAX_BLOCK_HASH, "a signed 64-bit int")
    return value


def _check_ints(values: list[Any], name: str, low: int, high: int, expected: str) -> None:
    # Three passes in C for the common case; the slow loop only to name a bad value.
    if values and (not set(map(type, values)) <= {int} or min(values) < low or max(values) > high):
        for index, value in enumerate(values):
            if type(value) is not int or not low <= value <= high:
                raise BadRequestError(f"{name}[{index}] must be {expected}, got {value!r}")


def _page_size(value: Any, name: str) -> int:
    if type(value) is not int or not 0 < value <= MAX_PAGE_SIZE:
        raise BadRequestError(f"{name} must be a positive int below 2**32, got {value!r}")
    return int(value)


def _u32_buffer(data: bytes, name: str) -> Sequence[int]:
    if len(data) % 4:
        raise BadRequestError(
            f"{name}: {len(data)} bytes is not a whole number of little-endian u32 token ids"
        )
    if _LITTLE_ENDIAN:
        return memoryview(data).cast("I")  # read in place: no copy of the prompt
    ids = array("I", data)
    ids.byteswap()
    return ids


def _i64_buffer(data: bytes, name: str) -> Sequence[int]:
    if len(data) % 8:
        raise BadRequestError(
            f"{name}: {len(data)} bytes is not a whole number of little-endian i64 block hashes"
        )
    hashes = array("q", data)
    if not _LITTLE_ENDIAN:
        hashes.byteswap()
    return hashes


def _binary_query(body: bytes, query_string: bytes) -> Query:
    if not query_string:
        return TokenQuery(_u32_buffer(body, "body"))
    try:
        pairs = parse_qsl(
            query_string.decode("ascii"),
            keep_blank_values=True,
            strict_parsing=True,
            encoding="utf-8",
            errors="strict",
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequestError(f"bad query string: {exc}") from None
    parameters: dict[str, str] = {}
    for key, value in pairs:
        if key not in _BINARY_PARAMETERS:
            raise BadRequestError(
                f"unknown query parameter {key!r} (expected extra_key or page_size)"
            )
        if key in parameters:
            raise BadRequestError(f"query parameter {key!r} given twice")
        parameters[key] = value
    if "page_size" in parameters:
        if "extra_key" in parameters:
            raise BadRequestError(
                "extra_key does not go with page_size (block hashes carry the namespace)"
            )
        text = parameters["page_size"]
        if not (text.isascii() and text.isdigit()):
            raise BadRequestError(f"page_size must be a positive int, got {text!r}")
        return HashQuery(_i64_buffer(body, "body"), _page_size(int(text), "page_size"))
    return TokenQuery(_u32_buffer(body, "body"), parameters.get("extra_key"))
