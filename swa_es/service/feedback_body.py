"""The bodies ``POST /v1/feedback`` accepts, parsed into reports (no HTTP here).

A router reports, per routed request, the source (worker) it chose, the prompt tokens the
engine actually reused there (vLLM's ``usage.prompt_tokens_details.cached_tokens``, sglang's
``meta_info.cached_tokens``), and what the index predicted, in one of two forms:

- the prompt (token ids and ``extra_key``, or block hashes and ``page_size``, as ``/v1/match``
  takes them): the follower matches it when the report arrives;
- the answer the router got from ``/v1/match`` (``predicted``: per source its ``cached_tokens``
  and ``usable_tokens``) with ``prompt_tokens``, the prompt's length.

Every body is a batch. Three encodings, chosen by ``Content-Type``:

- ``application/json`` (also the default) and ``application/msgpack``: ``{"reports": [...]}``;
  each report is ``{"source": str, "reused_tokens": int, ...}`` and either ``token_ids``
  (``extra_key``), ``block_hashes`` and ``page_size``, or ``predicted`` and ``prompt_tokens``.
  ``prompt_tokens`` may be given with a prompt too (it must then hold the token ids; with block
  hashes it replaces ``pages * page_size``). A ``predicted`` entry may be a ``/v1/match``
  source answer as received: keys other than ``cached_tokens`` and ``usable_tokens`` are
  ignored. In msgpack, ``token_ids`` may be a ``bin`` of little-endian u32 and ``block_hashes``
  a ``bin`` of little-endian i64.
- ``application/octet-stream``: the compact layout of ``BINARY_LAYOUT`` (docs/routing.md).

Every problem raises ``match_query.BadRequestError`` naming what is wrong and where (400), and
``UnsupportedMediaError`` for a type none of these (415).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from swa_es.client.feedback import (
    FORM_HASHES,
    FORM_PREDICTED,
    FORM_TOKENS,
    LAYOUT_ENTRY,
    LAYOUT_HASHES,
    LAYOUT_HEADER,
    LAYOUT_PREDICTED,
    LAYOUT_REPORT,
    LAYOUT_TOKENS,
    LAYOUT_U16,
    MAGIC,
    NO_EXTRA_KEY,
    NULL_U32,
    VERSION,
)
from swa_es.service.match_query import (
    MAX_BLOCK_HASH,
    MAX_PAGE_SIZE,
    MAX_TOKEN_ID,
    MIN_BLOCK_HASH,
    OCTET_STREAM,
    BadRequestError,
    HashQuery,
    Query,
    TokenQuery,
    decode_object_body,
    media_type,
)

MAX_REPORTS: Final = 4096
"""The most reports one body may carry."""
MAX_SOURCE_NAME_BYTES: Final = 256
"""The longest source name (UTF-8 bytes) a report may name."""
MAX_TOKENS: Final = 0xFFFFFFFF
"""The largest token count a report may carry (u32)."""

BINARY_LAYOUT: Final = """\
All integers little-endian.
header     magic "SWFB" | version u8 = 1 | reserved u8 = 0 | names u16 | reports u32
names      `names` times: length u16 | UTF-8 bytes       (sources, referred to by index)
reports    `reports` times:
  chosen u16 (index of a name) | form u8 | reserved u8 = 0 | reused_tokens u32
  form 0 (token ids):    extra_key length u16 (0xFFFF: none) | count u32
                         | extra_key UTF-8 bytes | count x token id u32
  form 1 (block hashes): page_size u32 | count u32 | count x block hash i64
  form 2 (predicted):    prompt_tokens u32 | count u16
                         | count x (source u16 | cached_tokens u32 | usable_tokens u32)
                           (a length of 0xFFFFFFFF is null: not known)
Nothing may follow the last report."""
"""The ``application/octet-stream`` body (the client's ``feedback`` sends it)."""

_LITTLE_ENDIAN: Final = sys.byteorder == "little"
_REPORT_FIELDS: Final = frozenset(
    {
        "source",
        "reused_tokens",
        "token_ids",
        "extra_key",
        "block_hashes",
        "page_size",
        "predicted",
        "prompt_tokens",
    }
)


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the index said of one source for a prompt: its cached and usable tokens (None: not
    known, e.g. the source was offline or unknown)."""

    cached_tokens: int | None
    usable_tokens: int | None

    @property
    def tokens(self) -> int | None:
        """The prediction compared with what the engine reused: ``usable_tokens`` where known
        (what an SWA engine can reuse), else ``cached_tokens`` (a stream without SWA events)."""
        return self.usable_tokens if self.usable_tokens is not None else self.cached_tokens


@dataclass(frozen=True, slots=True)
class FeedbackReport:
    """One routed request: the ``source`` chosen, the tokens its engine ``reused``, and either
    the prompt (``query``, matched on arrival) or the ``predicted`` answer the router got; a
    source absent from ``predicted`` was predicted to hold none of the prompt.
    ``prompt_tokens``: the prompt's length (None: the pages of ``query`` times their size)."""

    source: str
    reused_tokens: int
    query: Query | None = None
    predicted: Mapping[str, Prediction] | None = None
    prompt_tokens: int | None = None

    def prompt_length(self) -> int:
        """The prompt's length in tokens: ``prompt_tokens``, else as counted from ``query``."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if isinstance(self.query, TokenQuery):
            return len(self.query.token_ids)
        if isinstance(self.query, HashQuery):
            return len(self.query.block_hashes) * self.query.page_size
        raise AssertionError("a report carries a query or prompt_tokens")


def parse_feedback(content_type: str | None, body: bytes) -> list[FeedbackReport]:
    """The reports of a ``POST /v1/feedback`` body of ``content_type``."""
    kind = media_type(content_type)
    if kind == OCTET_STREAM:
        return _binary_reports(body)
    return _object_reports(*decode_object_body(kind, body))


def _object_reports(raw: Any, encoding: str) -> list[FeedbackReport]:
    if type(raw) is not dict:
        raise BadRequestError(f"body must be a {encoding} object with reports")
    extra = sorted(str(key) for key in raw if key != "reports")
    if extra:
        raise BadRequestError(f"unknown field {extra[0]!r} beside reports")
    reports = raw.get("reports")
    if type(reports) is not list:
        raise BadRequestError("reports must be a list of report objects")
    _check_count(len(reports))
    parsed = []
    for index, report in enumerate(reports):
        where = f"reports[{index}]"
        if type(report) is not dict:
            raise BadRequestError(f"{where} must be an object")
        parsed.append(_object_report(report, where + "."))
    return parsed


def _check_count(count: int) -> None:
    if count == 0:
        raise BadRequestError("reports is empty")
    if count > MAX_REPORTS:
        raise BadRequestError(f"{count} reports exceed the limit of {MAX_REPORTS}")


def _object_report(raw: dict[Any, Any], where: str) -> FeedbackReport:
    unknown = sorted(str(key) for key in raw if key not in _REPORT_FIELDS)
    if unknown:
        raise BadRequestError(f"unknown field {where}{unknown[0]!r}")
    if "source" not in raw:
        raise BadRequestError(f"{where}source is required (the source the request went to)")
    if "reused_tokens" not in raw:
        raise BadRequestError(f"{where}reused_tokens is required (what the engine reused)")
    source = _source_name(raw["source"], f"{where}source")
    reused = _count(raw["reused_tokens"], f"{where}reused_tokens")
    prompt_tokens = None
    if "prompt_tokens" in raw:
        prompt_tokens = _count(raw["prompt_tokens"], f"{where}prompt_tokens")
    forms = [name for name in ("token_ids", "block_hashes", "predicted") if name in raw]
    if len(forms) != 1:
        said = " and ".join(forms) if forms else "none of them"
        raise BadRequestError(
            f"{where}: give exactly one of token_ids, block_hashes or predicted (got {said})"
        )
    query: Query | None = None
    predicted = None
    if forms[0] == "predicted":
        for name in ("extra_key", "page_size"):
            if name in raw:
                raise BadRequestError(f"{where}{name} goes only with a prompt, not predicted")
        if prompt_tokens is None:
            raise BadRequestError(f"{where}prompt_tokens is required with predicted")
        predicted = _predicted(raw["predicted"], f"{where}predicted")
    elif forms[0] == "block_hashes":
        if "extra_key" in raw:
            raise BadRequestError(f"{where}extra_key does not go with block_hashes")
        if "page_size" not in raw:
            raise BadRequestError(f"{where}page_size is required with block_hashes")
        query = HashQuery(
            _ints(raw["block_hashes"], f"{where}block_hashes", "q", MIN_BLOCK_HASH, MAX_BLOCK_HASH),
            _page_size(raw["page_size"], f"{where}page_size"),
        )
    else:
        if "page_size" in raw:
            raise BadRequestError(f"{where}page_size goes only with block_hashes")
        extra_key = raw.get("extra_key")
        if extra_key is not None and type(extra_key) is not str:
            raise BadRequestError(f"{where}extra_key must be a string or null")
        token_ids = _ints(raw["token_ids"], f"{where}token_ids", "I", 0, MAX_TOKEN_ID)
        query = TokenQuery(token_ids, extra_key)
    return _checked(FeedbackReport(source, reused, query, predicted, prompt_tokens), where)


def _checked(report: FeedbackReport, where: str) -> FeedbackReport:
    """``report``, once its lengths agree: the token ids it carries fit ``prompt_tokens``, and
    no more tokens were reused than the prompt holds."""
    query = report.query
    if (
        report.prompt_tokens is not None
        and isinstance(query, TokenQuery)
        and report.prompt_tokens < len(query.token_ids)
    ):
        raise BadRequestError(
            f"{where}prompt_tokens {report.prompt_tokens} is fewer than the "
            f"{len(query.token_ids)} token ids given"
        )
    if not isinstance(query, HashQuery) or report.prompt_tokens is not None:
        length = report.prompt_length()
        if report.reused_tokens > length:
            raise BadRequestError(
                f"{where}reused_tokens {report.reused_tokens} exceeds the prompt's {length} tokens"
            )
    return report


def _source_name(value: Any, name: str) -> str:
    if type(value) is not str or not value:
        raise BadRequestError(f"{name} must be a non-empty string, got {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_SOURCE_NAME_BYTES:
        raise BadRequestError(f"{name} is longer than {MAX_SOURCE_NAME_BYTES} bytes")
    return value


def _count(value: Any, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise BadRequestError(f"{name} must be an int in [0, 2**32), got {value!r}")
    return int(value)


def _page_size(value: Any, name: str) -> int:
    if type(value) is not int or not 0 < value <= MAX_PAGE_SIZE:
        raise BadRequestError(f"{name} must be a positive int below 2**32, got {value!r}")
    return int(value)


def _ints(value: Any, name: str, typecode: str, low: int, high: int) -> Sequence[int]:
    if type(value) is bytes:
        return _buffer(value, name, typecode)
    if type(value) is not list:
        raise BadRequestError(f"{name} must be a list of ints")
    if value and (not set(map(type, value)) <= {int} or min(value) < low or max(value) > high):
        for index, item in enumerate(value):
            if type(item) is not int or not low <= item <= high:
                raise BadRequestError(f"{name}[{index}] must be an int in [{low}, {high}]")
    return value


def _buffer(data: bytes, name: str, typecode: str) -> Sequence[int]:
    values = array(typecode)
    if len(data) % values.itemsize:
        raise BadRequestError(
            f"{name}: {len(data)} bytes is not a whole number of {values.itemsize}-byte values"
        )
    values.frombytes(data)
    if not _LITTLE_ENDIAN:
        values.byteswap()
    return values


def _predicted(value: Any, name: str) -> dict[str, Prediction]:
    if type(value) is not dict:
        raise BadRequestError(f"{name} must be an object: source -> its answer")
    predicted = {}
    for source, entry in value.items():
        where = f"{name}[{source!r}]"
        _source_name(source, f"{name} key")
        if type(entry) is not dict:
            raise BadRequestError(f"{where} must be an object with cached_tokens, usable_tokens")
        lengths = []
        for field in ("cached_tokens", "usable_tokens"):
            length = entry.get(field)
            if length is not None:
                length = _count(length, f"{where}.{field}")
            lengths.append(length)
        predicted[source] = Prediction(lengths[0], lengths[1])
    return predicted


class _Reader:
    """Reads the binary layout front to back, naming where it fails."""

    def __init__(self, body: bytes) -> None:
        self.view = memoryview(body)
        self.offset = 0

    def take(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        end = self.offset + layout.size
        if end > len(self.view):
            raise BadRequestError(f"body ends inside {what} (at byte {self.offset})")
        values = layout.unpack_from(self.view, self.offset)
        self.offset = end
        return values

    def raw(self, size: int, what: str) -> bytes:
        end = self.offset + size
        if end > len(self.view):
            raise BadRequestError(
                f"body ends inside {what}: {size} bytes needed at byte {self.offset}"
            )
        data = bytes(self.view[self.offset : end])
        self.offset = end
        return data


def _binary_reports(body: bytes) -> list[FeedbackReport]:
    reader = _Reader(body)
    magic, version, reserved, name_count, report_count = reader.take(LAYOUT_HEADER, "the header")
    if magic != MAGIC:
        raise BadRequestError(f"body does not start with {MAGIC!r} (got {bytes(magic)!r})")
    if version != VERSION:
        raise BadRequestError(f"body version {version} is not served (expected {VERSION})")
    if reserved:
        raise BadRequestError("the header's reserved byte must be 0")
    _check_count(report_count)
    names = []
    for index in range(name_count):
        where = f"names[{index}]"
        (length,) = reader.take(LAYOUT_U16, where)
        try:
            text = reader.raw(length, where).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequestError(f"{where} is not UTF-8") from None
        names.append(_source_name(text, where))

    def name_of(index: int, where: str) -> str:
        if index >= len(names):
            raise BadRequestError(f"{where} {index} names no source (there are {len(names)})")
        return names[index]

    reports = []
    for index in range(report_count):
        where = f"reports[{index}]"
        chosen, form, reserved, reused = reader.take(LAYOUT_REPORT, where)
        source = name_of(chosen, f"{where}.chosen")
        if reserved:
            raise BadRequestError(f"{where}: the reserved byte must be 0")
        query: Query | None = None
        predicted = None
        prompt_tokens = None
        if form == FORM_TOKENS:
            key_length, count = reader.take(LAYOUT_TOKENS, where)
            extra_key = None
            if key_length != NO_EXTRA_KEY:
                try:
                    extra_key = reader.raw(key_length, f"{where}.extra_key").decode("utf-8")
                except UnicodeDecodeError:
                    raise BadRequestError(f"{where}.extra_key is not UTF-8") from None
            ids = reader.raw(4 * count, f"{where}.token_ids")
            query = TokenQuery(_buffer(ids, f"{where}.token_ids", "I"), extra_key)
        elif form == FORM_HASHES:
            page_size, count = reader.take(LAYOUT_HASHES, where)
            hashes = reader.raw(8 * count, f"{where}.block_hashes")
            query = HashQuery(
                _buffer(hashes, f"{where}.block_hashes", "q"),
                _page_size(page_size, f"{where}.page_size"),
            )
        elif form == FORM_PREDICTED:
            prompt_tokens, count = reader.take(LAYOUT_PREDICTED, where)
            predicted = {}
            for entry in range(count):
                at = f"{where}.predicted[{entry}]"
                other, cached, usable = reader.take(LAYOUT_ENTRY, at)
                predicted[name_of(other, f"{at}.source")] = Prediction(
                    None if cached == NULL_U32 else cached,
                    None if usable == NULL_U32 else usable,
                )
        else:
            raise BadRequestError(f"{where}: form {form} is not one of 0, 1, 2")
        report = FeedbackReport(source, reused, query, predicted, prompt_tokens)
        reports.append(_checked(report, where + "."))
    if reader.offset != len(body):
        raise BadRequestError(
            f"{len(body) - reader.offset} bytes follow the last report (at byte {reader.offset})"
        )
    return reports
