"""Reports of routed requests for ``POST /v1/feedback``, and the binary body they travel in.

A router tells the follower, per routed request, which source it chose and how many prompt
tokens the engine actually reused there (vLLM: ``usage.prompt_tokens_details.cached_tokens``;
sglang: ``meta_info.cached_tokens``), with what the index predicted: best the ``MatchAnswer`` it
routed on (``Feedback.of_answer``), else the prompt, which the follower matches when the report
arrives (``Feedback.of_prompt``; right only while the engine's events for this very request have
not reached the follower yet). The body's layout is documented in docs/routing.md ("Feedback and
prediction quality").
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from swa_es.client.answers import MatchAnswer
from swa_es.client.wire import OCTET_STREAM, HashedPrompt, Prompt, Request, i64_bytes, u32_bytes

FEEDBACK_PATH: Final = "/v1/feedback"
QUALITY_PATH: Final = "/v1/quality"
MAGIC: Final = b"SWFB"
VERSION: Final = 1
NULL_U32: Final = 0xFFFFFFFF
"""A ``predicted`` length not known (the binary layout's null)."""
NO_EXTRA_KEY: Final = 0xFFFF
"""An ``extra_key`` length meaning no extra key."""
FORM_TOKENS: Final = 0
FORM_HASHES: Final = 1
FORM_PREDICTED: Final = 2
# The binary body's parts (docs/routing.md, and the server's parser, swa_es.service.feedback_body,
# which reads with these same layouts).
LAYOUT_HEADER: Final = struct.Struct("<4sBBHI")
LAYOUT_U16: Final = struct.Struct("<H")
LAYOUT_REPORT: Final = struct.Struct("<HBBI")
LAYOUT_TOKENS: Final = struct.Struct("<HI")
LAYOUT_HASHES: Final = struct.Struct("<II")
LAYOUT_PREDICTED: Final = struct.Struct("<IH")
LAYOUT_ENTRY: Final = struct.Struct("<HII")


@dataclass(frozen=True, slots=True)
class Feedback:
    """One routed request: the ``source`` it went to, the prompt tokens its engine
    ``reused_tokens``, and either the ``prompt`` (token ids or block hashes) or the ``answer``
    the router got from ``/v1/match`` with the prompt's length ``prompt_tokens``."""

    source: str
    reused_tokens: int
    prompt: Prompt | HashedPrompt | None = None
    answer: MatchAnswer | None = None
    prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.answer is None):
            raise ValueError("Feedback: give exactly one of prompt and answer")
        if self.answer is not None and self.prompt_tokens is None:
            raise ValueError("Feedback: prompt_tokens is required with an answer")

    @classmethod
    def of_answer(
        cls, source: str, reused_tokens: int, answer: MatchAnswer, prompt_tokens: int
    ) -> Feedback:
        """A report carrying the answer the router routed on (the exact prediction)."""
        return cls(source, reused_tokens, answer=answer, prompt_tokens=prompt_tokens)

    @classmethod
    def of_prompt(
        cls,
        source: str,
        reused_tokens: int,
        token_ids: Sequence[int],
        extra_key: str | None = None,
    ) -> Feedback:
        """A report carrying the prompt, matched by the follower when it arrives."""
        return cls(source, reused_tokens, prompt=Prompt(token_ids, extra_key))


@dataclass(frozen=True, slots=True)
class FeedbackReceipt:
    """What the follower made of one ``feedback`` call: reports ``accepted``, how many it
    judged routed wrongly (``incorrect``) and how many had no known prediction for the source
    chosen (``unpredicted``: offline, unknown, another page size)."""

    accepted: int
    incorrect: int
    unpredicted: int

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> FeedbackReceipt:
        """From the JSON reply."""
        return cls(int(raw["accepted"]), int(raw["incorrect"]), int(raw["unpredicted"]))


def _u32(value: int, name: str) -> int:
    if type(value) is not int or not 0 <= value < NULL_U32:
        raise ValueError(f"{name} must be an int in [0, 2**32 - 1), got {value!r}")
    return value


def _length(value: int | None, name: str) -> int:
    return NULL_U32 if value is None else _u32(value, name)


def feedback_request(reports: Sequence[Feedback]) -> Request:
    """``reports`` as one binary body (docs/routing.md's layout)."""
    if not reports:
        raise ValueError("feedback: no reports")
    names: dict[str, int] = {}

    def index(name: str) -> int:
        found = names.get(name)
        if found is None:
            if len(names) >= 0xFFFF:
                raise ValueError("feedback: more than 65535 source names in one body")
            found = names[name] = len(names)
        return found

    parts: list[bytes] = []
    for report in reports:
        chosen = index(report.source)
        reused = _u32(report.reused_tokens, "reused_tokens")
        prompt = report.prompt
        if isinstance(prompt, HashedPrompt):
            hashes = i64_bytes(prompt.block_hashes)
            parts += [
                LAYOUT_REPORT.pack(chosen, FORM_HASHES, 0, reused),
                LAYOUT_HASHES.pack(_u32(prompt.page_size, "page_size"), len(hashes) // 8),
                hashes,
            ]
        elif isinstance(prompt, Prompt):
            ids = u32_bytes(prompt.token_ids)
            key = b"" if prompt.extra_key is None else prompt.extra_key.encode("utf-8")
            if len(key) >= NO_EXTRA_KEY:
                raise ValueError("feedback: extra_key is longer than 65534 bytes")
            key_length = NO_EXTRA_KEY if prompt.extra_key is None else len(key)
            parts += [
                LAYOUT_REPORT.pack(chosen, FORM_TOKENS, 0, reused),
                LAYOUT_TOKENS.pack(key_length, len(ids) // 4),
                key,
                ids,
            ]
        else:
            assert report.answer is not None and report.prompt_tokens is not None
            sources = report.answer.sources
            entries = [
                LAYOUT_ENTRY.pack(
                    index(name),
                    _length(found.cached_tokens, "cached_tokens"),
                    _length(found.usable_tokens, "usable_tokens"),
                )
                for name, found in sources.items()
            ]
            if len(entries) > 0xFFFF:
                raise ValueError("feedback: an answer of more than 65535 sources")
            parts += [
                LAYOUT_REPORT.pack(chosen, FORM_PREDICTED, 0, reused),
                LAYOUT_PREDICTED.pack(_u32(report.prompt_tokens, "prompt_tokens"), len(entries)),
                *entries,
            ]
    table = []
    for name in names:
        encoded = name.encode("utf-8")
        table += [LAYOUT_U16.pack(len(encoded)), encoded]
    header = LAYOUT_HEADER.pack(MAGIC, VERSION, 0, len(names), len(reports))
    return Request(FEEDBACK_PATH, OCTET_STREAM, b"".join([header, *table, *parts]))
