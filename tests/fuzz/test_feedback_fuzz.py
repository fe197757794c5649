"""Fuzzing the ``POST /v1/feedback`` body parser (``feedback_body.parse_feedback``) directly:
any bytes under any content type give reports or the parser's typed refusal
(``BadRequestError``, 400; ``UnsupportedMediaError``, 415), never another exception.

Three sources of input: arbitrary bytes, valid bodies of every encoding (JSON, msgpack and the
binary ``SWFB`` layout), which must parse to the reports they carry, and those valid bodies
with bytes flipped, cut, inserted or overwritten, fields replaced by arbitrary values, or the
binary header's counts set to their largest values. The same bodies over a real socket are in
``test_http_auth_fuzz.py``.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swa_es.service.feedback_body import FeedbackReport, parse_feedback
from swa_es.service.match_query import BadRequestError, HashQuery, UnsupportedMediaError
from tests.fuzz.feedback_bodies import (
    BINARY_TYPE,
    ENCODERS,
    JSON_TYPE,
    MSGPACK_TYPE,
    MUTATIONS,
    REPORT_LISTS,
    mutate,
)
from tests.fuzz.json_values import json_values

CONTENT_TYPES = st.sampled_from(
    [
        JSON_TYPE,
        MSGPACK_TYPE,
        BINARY_TYPE,
        "application/x-msgpack",
        "application/json; charset=utf-8",
        "Application/Octet-Stream",
        "text/plain",
        "",
        ";",
        "application/json;;;",
    ]
)
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
JSON_VALUES = json_values(integer_bound=2**64)


def parse_or_refusal(
    content_type: str | None, body: bytes
) -> list[FeedbackReport] | BadRequestError | UnsupportedMediaError:
    """The reports, or the typed refusal; any other exception fails the test."""
    try:
        parsed = parse_feedback(content_type, body)
    except (BadRequestError, UnsupportedMediaError) as refusal:
        assert str(refusal), "a refusal says what is wrong"
        return refusal
    assert parsed, "a body that parses carries at least one report"
    for report in parsed:
        assert report.source and report.prompt_length() >= 0
        if report.prompt_tokens is not None or not isinstance(report.query, HashQuery):
            # (block hashes cover whole pages only: a prompt's tail may be longer)
            assert report.reused_tokens <= report.prompt_length()
    return parsed


@SETTINGS
@given(content_type=CONTENT_TYPES, body=st.binary(max_size=400))
def test_arbitrary_bytes(content_type: str, body: bytes) -> None:
    """Any bytes under any content type: reports or the typed refusal."""
    parse_or_refusal(content_type, body)


@SETTINGS
@given(body=st.binary(max_size=200).map(lambda tail: b"SWFB\x01\x00" + tail))
def test_arbitrary_binary_after_a_valid_magic(body: bytes) -> None:
    """Random bytes behind a valid magic and version reach the binary reader's every branch:
    reports or a ``BadRequestError``."""
    outcome = parse_or_refusal(BINARY_TYPE, body)
    assert not isinstance(outcome, UnsupportedMediaError)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content_type=st.sampled_from(sorted(ENCODERS)), reports=REPORT_LISTS)
def test_valid_bodies_parse_to_their_reports(
    content_type: str, reports: list[dict[str, Any]]
) -> None:
    """A valid body of each encoding parses to the reports it carries."""
    parsed = parse_or_refusal(content_type, ENCODERS[content_type](reports))
    assert isinstance(parsed, list), parsed
    assert [(r.source, r.reused_tokens) for r in parsed] == [
        (r["source"], r["reused_tokens"]) for r in reports
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    content_type=st.sampled_from(sorted(ENCODERS)),
    reports=REPORT_LISTS,
    mutations=st.lists(MUTATIONS, min_size=1, max_size=3),
)
def test_mutated_valid_bodies(
    content_type: str, reports: list[dict[str, Any]], mutations: list[tuple[Any, ...]]
) -> None:
    """A valid body with up to three bytes-level mutations: reports or a ``BadRequestError``."""
    body = ENCODERS[content_type](reports)
    for mutation in mutations:
        body = mutate(body, mutation)
    outcome = parse_or_refusal(content_type, body)
    assert not isinstance(outcome, UnsupportedMediaError)


def _fields(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value inside a decoded body."""
    found: list[tuple[Any, ...]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found.append((*here, key))
        found += _fields(item, (*here, key))
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    encoding=st.sampled_from([JSON_TYPE, MSGPACK_TYPE]),
    reports=REPORT_LISTS,
    data=st.data(),
)
def test_one_field_replaced_dropped_or_added(
    encoding: str, reports: list[dict[str, Any]], data: st.DataObject
) -> None:
    """A valid JSON or msgpack body with one field replaced by an arbitrary value (in msgpack
    also bytes, the packed-array form), dropped, or added: reports or a ``BadRequestError``."""
    document: Any = {"reports": reports}
    path = data.draw(st.sampled_from(_fields(document)))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    values = JSON_VALUES | st.binary(max_size=24) if encoding == MSGPACK_TYPE else JSON_VALUES
    if action == "drop":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.sampled_from(["x", "source", "predicted", "page_size"]))] = data.draw(
            values
        )
    else:
        parent[path[-1]] = data.draw(values)
    if encoding == JSON_TYPE:
        try:
            body = orjson.dumps(document)
        except orjson.JSONEncodeError:  # an integer orjson does not write: the stdlib does
            import json

            body = json.dumps(document).encode()
    else:
        try:
            body = msgpack.packb(document, use_bin_type=True)
        except OverflowError:  # an integer msgpack cannot carry
            return
    outcome = parse_or_refusal(encoding, body)
    assert not isinstance(outcome, UnsupportedMediaError)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reports=REPORT_LISTS,
    names=st.sampled_from([0, 1, 0xFFFF]),
    count=st.sampled_from([0, 1, 4096, 4097, 0xFFFFFFFF]),
    tail=st.binary(max_size=32),
)
def test_binary_header_counts_at_their_limits(
    reports: list[dict[str, Any]], names: int, count: int, tail: bytes
) -> None:
    """A valid ``SWFB`` body whose name and report counts say 0, 1 or their largest values:
    a ``BadRequestError`` naming the problem (never a read past the body, an allocation of
    the declared size, or a hang)."""
    body = ENCODERS[BINARY_TYPE](reports)
    body = struct.pack("<4sBBHI", b"SWFB", 1, 0, names, count) + body[12:] + tail
    parse_or_refusal(BINARY_TYPE, body)
