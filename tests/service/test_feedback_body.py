"""``POST /v1/feedback`` bodies (``feedback_body``): the JSON, msgpack and binary forms of the
same reports read alike, the client's binary encoder writes what the server reads, and every
damaged body is refused with a message naming what is wrong and where."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import orjson
import pytest

from swa_es.client import Feedback, HashedPrompt, Prompt
from swa_es.client.answers import MatchAnswer, SourceMatch
from swa_es.client.feedback import feedback_request
from swa_es.service.feedback_body import (
    MAX_REPORTS,
    FeedbackReport,
    Prediction,
    parse_feedback,
)
from swa_es.service.match_query import BadRequestError, HashQuery, TokenQuery

ANSWER = MatchAnswer(
    {
        "w0": SourceMatch(32, 24, "exact"),
        "w1": SourceMatch(16, None, "exact"),
        "w2": SourceMatch(None, None, "offline"),
    }
)
REPORTS = [
    Feedback.of_prompt("w0", 4, [1, 2, 3, 4, 5], "tenant-a"),
    Feedback("w1", 8, prompt=HashedPrompt([-(2**63), 7, 2**63 - 1], 4)),
    Feedback.of_answer("w1", 16, ANSWER, 40),
    Feedback.of_prompt("w2", 0, [9]),
]


def _plain(report: FeedbackReport) -> tuple[Any, ...]:
    query: Any = report.query
    if isinstance(query, TokenQuery):
        query = ("tokens", list(query.token_ids), query.extra_key)
    elif isinstance(query, HashQuery):
        query = ("hashes", list(query.block_hashes), query.page_size)
    predicted = None if report.predicted is None else dict(report.predicted)
    return (report.source, report.reused_tokens, query, predicted, report.prompt_length())


EXPECTED = [
    ("w0", 4, ("tokens", [1, 2, 3, 4, 5], "tenant-a"), None, 5),
    ("w1", 8, ("hashes", [-(2**63), 7, 2**63 - 1], 4), None, 12),
    (
        "w1",
        16,
        None,
        {"w0": Prediction(32, 24), "w1": Prediction(16, None), "w2": Prediction(None, None)},
        40,
    ),
    ("w2", 0, ("tokens", [9], None), None, 1),
]

JSON_BODY = {
    "reports": [
        {"source": "w0", "reused_tokens": 4, "token_ids": [1, 2, 3, 4, 5], "extra_key": "tenant-a"},
        {
            "source": "w1",
            "reused_tokens": 8,
            "block_hashes": [-(2**63), 7, 2**63 - 1],
            "page_size": 4,
        },
        {
            "source": "w1",
            "reused_tokens": 16,
            "prompt_tokens": 40,
            "predicted": {
                # a /v1/match answer as received: state, last_heard_s and tiers are ignored
                "w0": {"cached_tokens": 32, "usable_tokens": 24, "state": "exact", "tiers": {}},
                "w1": {"cached_tokens": 16, "usable_tokens": None, "last_heard_s": 0.1},
                "w2": {"cached_tokens": None, "usable_tokens": None, "state": "offline"},
            },
        },
        {"source": "w2", "reused_tokens": 0, "token_ids": [9]},
    ]
}


def test_the_three_encodings_read_alike() -> None:
    """The client's binary body, JSON and msgpack (ids and hashes as ``bin``) of the same
    reports parse to the same reports."""
    request = feedback_request(REPORTS)
    assert (request.target, request.content_type) == ("/v1/feedback", "application/octet-stream")
    binary = parse_feedback(request.content_type, request.body)
    assert [_plain(r) for r in binary] == EXPECTED
    assert [_plain(r) for r in parse_feedback(None, orjson.dumps(JSON_BODY))] == EXPECTED
    packed = orjson.loads(orjson.dumps(JSON_BODY))
    packed["reports"][0]["token_ids"] = struct.pack("<5I", 1, 2, 3, 4, 5)
    packed["reports"][1]["block_hashes"] = struct.pack("<3q", -(2**63), 7, 2**63 - 1)
    parsed = parse_feedback("application/msgpack", msgpack.packb(packed))
    assert [_plain(r) for r in parsed] == EXPECTED


def test_the_prediction_compared_is_usable_where_known_else_cached() -> None:
    assert Prediction(32, 24).tokens == 24
    assert Prediction(16, None).tokens == 16
    assert Prediction(None, None).tokens is None


def _json(*reports: dict[str, Any], **extra: Any) -> bytes:
    return orjson.dumps({"reports": list(reports), **extra})


TOKENS = {"source": "w0", "reused_tokens": 4, "token_ids": [1, 2, 3, 4]}
BAD_JSON = [
    (b"{", "not JSON"),
    (b"[]", "object with reports"),
    (_json(TOKENS, extra=1), "unknown field 'extra' beside reports"),
    (_json(), "reports is empty"),
    (orjson.dumps({"reports": [TOKENS] * (MAX_REPORTS + 1)}), "exceed the limit"),
    (orjson.dumps({"reports": [TOKENS, 3]}), "reports[1] must be an object"),
    (_json({**TOKENS, "chosen": "w0"}), "unknown field reports[0].'chosen'"),
    (_json({"reused_tokens": 1, "token_ids": [1]}), "reports[0].source is required"),
    (_json({"source": "w0", "token_ids": [1]}), "reports[0].reused_tokens is required"),
    (_json({**TOKENS, "source": ""}), "source must be a non-empty string"),
    (_json({**TOKENS, "source": "x" * 257}), "longer than 256 bytes"),
    (_json({**TOKENS, "reused_tokens": -1}), "reused_tokens must be an int"),
    (_json({**TOKENS, "reused_tokens": 5}), "reused_tokens 5 exceeds the prompt's 4 tokens"),
    (_json({**TOKENS, "prompt_tokens": 3}), "prompt_tokens 3 is fewer than the 4 token ids"),
    (_json({"source": "w0", "reused_tokens": 0}), "exactly one of token_ids, block_hashes"),
    (_json({**TOKENS, "block_hashes": [1], "page_size": 4}), "got token_ids and block_hashes"),
    (_json({**TOKENS, "token_ids": [1, "2"]}), "reports[0].token_ids[1] must be an int"),
    (_json({**TOKENS, "token_ids": [2**32]}), "token_ids[0] must be an int"),
    (_json({**TOKENS, "page_size": 4}), "page_size goes only with block_hashes"),
    (_json({**TOKENS, "extra_key": 3}), "extra_key must be a string or null"),
    (
        _json({"source": "w0", "reused_tokens": 0, "block_hashes": [1]}),
        "page_size is required with block_hashes",
    ),
    (
        _json({"source": "w0", "reused_tokens": 0, "block_hashes": [2**63], "page_size": 4}),
        "block_hashes[0] must be an int",
    ),
    (
        _json({"source": "w0", "reused_tokens": 0, "block_hashes": [1], "page_size": 0}),
        "page_size must be a positive int",
    ),
    (
        _json({"source": "w0", "reused_tokens": 0, "predicted": {}}),
        "prompt_tokens is required with predicted",
    ),
    (
        _json({"source": "w0", "reused_tokens": 0, "prompt_tokens": 8, "predicted": []}),
        "predicted must be an object",
    ),
    (
        _json(
            {
                "source": "w0",
                "reused_tokens": 0,
                "prompt_tokens": 8,
                "predicted": {"w1": {"cached_tokens": -3}},
            }
        ),
        "reports[0].predicted['w1'].cached_tokens must be an int",
    ),
]


@pytest.mark.parametrize(("body", "says"), BAD_JSON, ids=[s for _, s in BAD_JSON])
def test_a_bad_object_body_is_refused_naming_what_and_where(body: bytes, says: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_feedback("application/json", body)
    assert says in str(caught.value)


def _binary(*reports: Feedback) -> bytes:
    return feedback_request(list(reports)).body


GOOD = _binary(Feedback.of_prompt("w0", 4, [1, 2, 3, 4]))
HEADER = struct.Struct("<4sBBHI")


def _report_at() -> int:
    return HEADER.size + 2 + len("w0")


BAD_BINARY = [
    (b"SWF", "body ends inside the header (at byte 0)"),
    (b"XXXX" + GOOD[4:], "does not start with b'SWFB'"),
    (GOOD[:4] + b"\x02" + GOOD[5:], "version 2 is not served"),
    (GOOD[:5] + b"\x01" + GOOD[6:], "the header's reserved byte must be 0"),
    (HEADER.pack(b"SWFB", 1, 0, 0, 0), "reports is empty"),
    (GOOD[:-1], "body ends inside reports[0].token_ids: 16 bytes needed"),
    (GOOD + b"\x00", "1 bytes follow the last report"),
    (GOOD[:12] + b"\x00\xff" + GOOD[14:], "body ends inside names[0]: 65280 bytes needed"),
    (GOOD[:14] + b"\xff\xfe" + GOOD[16:], "names[0] is not UTF-8"),
    (
        GOOD[: _report_at()] + b"\x05\x00" + GOOD[_report_at() + 2 :],
        "reports[0].chosen 5 names no source (there are 1)",
    ),
    (
        GOOD[: _report_at() + 2] + b"\x07" + GOOD[_report_at() + 3 :],
        "reports[0]: form 7 is not one of 0, 1, 2",
    ),
    (
        GOOD[: _report_at() + 4] + struct.pack("<I", 9) + GOOD[_report_at() + 8 :],
        "reports[0].reused_tokens 9 exceeds the prompt's 4 tokens",
    ),
    (
        _binary(Feedback("w0", 0, prompt=HashedPrompt([1], 4)))[:-1],
        "body ends inside reports[0].block_hashes",
    ),
]


@pytest.mark.parametrize(("body", "says"), BAD_BINARY, ids=[s for _, s in BAD_BINARY])
def test_a_bad_binary_body_is_refused_naming_what_and_where(body: bytes, says: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_feedback("application/octet-stream", body)
    assert says in str(caught.value)


def test_the_client_refuses_what_it_cannot_encode() -> None:
    with pytest.raises(ValueError, match="exactly one of prompt and answer"):
        Feedback("w0", 1)
    with pytest.raises(ValueError, match="prompt_tokens is required"):
        Feedback("w0", 1, answer=ANSWER)
    with pytest.raises(ValueError, match="no reports"):
        feedback_request([])
    with pytest.raises(ValueError, match="reused_tokens"):
        feedback_request([Feedback.of_prompt("w0", -1, [1])])
    assert Prompt([1]) == Feedback.of_prompt("w0", 0, [1]).prompt
