"""The binary reply of ``POST /v1/match`` (``swa_es.client.packed_answers``): the same answers as
the JSON reply, field for field (tiers and ``last_heard_s`` included), for every source state,
both prompt forms and both server routes; asked for only through ``Accept``; and a reply that
breaks the layout is a ``PackedAnswersError`` naming the part, never a wrong answer."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from cache.events import _native, chain_block_hashes, namespace_prior
from swa_es.client import RoutingClient
from swa_es.client.answers import SourceMatch, TierMatch, parse_sources
from swa_es.client.packed_answers import (
    HEADER,
    INDEX,
    MAGIC,
    PACKED_ANSWERS,
    ROW,
    TIER,
    AnswerRows,
    AnswersReader,
    PackedAnswersError,
    read,
)
from swa_es.service.http_app import AppParts, build_app, wants_packed
from swa_es.service.http_server import HttpServer
from swa_es.service.match_query import HashQuery, TokenQuery
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from tests.service.test_routing_tiers import PAGE, PROMPT, serving


def full(sources: dict[str, SourceMatch]) -> dict[str, tuple[Any, ...]]:
    """Every field of each answer (``SourceMatch`` equality leaves out tiers and heard)."""
    return {
        name: (m.cached_tokens, m.usable_tokens, m.state, m.last_heard_s, dict(m.tiers))
        for name, m in sources.items()
    }


def packed_and_json(routing: FollowerRouting, query: TokenQuery | HashQuery) -> tuple[Any, Any]:
    rows = routing.answer_rows(query)
    sources, as_of = read(rows.frame(routing.as_of_json()))
    assert orjson.loads(as_of) == routing.as_of()
    return full(sources), full(parse_sources(routing.answer(query)))


def test_the_layout_is_the_native_stores() -> None:
    assert ROW.format == _native.ANSWER_ROW_FORMAT
    assert TIER.format == _native.ANSWER_TIER_FORMAT
    assert "<" + INDEX == _native.ANSWER_INDEX_FORMAT


async def test_packed_answers_equal_the_json_ones_in_every_state(tmp_path: Path) -> None:
    """Exact sources with and without lower tiers, an offline one, a lagging follower
    (degraded), a diverged source (unknown), other page sizes (mismatch), both forms."""
    async with serving(tmp_path) as served:
        routing = FollowerRouting(served.follower, served.views)
        hashes = chain_block_hashes(namespace_prior(None), PROMPT, PAGE)
        queries: list[TokenQuery | HashQuery] = [
            TokenQuery(PROMPT),
            TokenQuery(PROMPT[:7]),
            TokenQuery([1, 2, 3, 4]),
            TokenQuery(PROMPT, "tenant"),
            HashQuery(hashes, PAGE),
            HashQuery(hashes[:3], PAGE),
            HashQuery(hashes, PAGE * 2),
        ]
        for query in queries:
            packed, json = packed_and_json(routing, query)
            assert packed == json, query
        assert {m[2] for m in packed_and_json(routing, queries[0])[0].values()} == {
            "exact",
            "offline",
        }
        lagging = FollowerRouting(served.follower, served.views, degraded_lag_records=-1)
        packed, json = packed_and_json(lagging, queries[0])
        assert packed == json and {m[2] for m in packed.values()} == {"degraded", "offline"}
        served.views.replicas.mark_diverged("gpu", "a gap (test)")
        packed, json = packed_and_json(routing, queries[0])
        assert packed == json and packed["gpu"][2] == "unknown"


async def test_the_binary_reply_is_given_only_when_asked(tmp_path: Path) -> None:
    """Over HTTP, on the protocol's hot route and through ASGI: ``Accept`` with the type
    (alone, in a list, any case) gets it; ``q=0``, another type or none gets JSON; the client
    asks for it and reads it."""
    async with serving(tmp_path) as served:
        routing = FollowerRouting(served.follower, served.views)
        body = struct.pack(f"<{len(PROMPT)}I", *PROMPT)
        binary = {"content-type": "application/octet-stream"}
        expected = full(parse_sources(routing.answer(TokenQuery(PROMPT))))
        parts = AppParts(registry_of(list), lambda: (True, "ok"), routing=routing)
        async with HttpServer(build_app(parts), hot_route=False) as asgi_only:
            for url in (served.url, asgi_only.url):
                async with httpx.AsyncClient(base_url=url) as raw:
                    for accept in (PACKED_ANSWERS, "text/html, APPLICATION/VND.SWA-ES.ANSWERS"):
                        headers = binary | {"accept": accept}
                        reply = await raw.post("/v1/match", content=body, headers=headers)
                        assert reply.headers["content-type"] == PACKED_ANSWERS
                        assert full(read(reply.content)[0]) == expected
                    for accept in (f"{PACKED_ANSWERS};q=0", "application/json", None):
                        headers = binary if accept is None else binary | {"accept": accept}
                        reply = await raw.post("/v1/match", content=body, headers=headers)
                        assert reply.headers["content-type"] == "application/json"
                        assert full(parse_sources(reply.json()["sources"])) == expected
                with RoutingClient(url) as client:
                    answered = await anyio.to_thread.run_sync(client.match, PROMPT)
                    assert full(answered.sources) == expected


def test_accept_negotiation() -> None:
    assert wants_packed(PACKED_ANSWERS.encode())
    assert wants_packed(b"application/json, application/vnd.swa-es.answers;q=0.5")
    assert not wants_packed(b"application/vnd.swa-es.answers; q=0.000")
    assert not wants_packed(b"application/vnd.swa-es.answers2")
    assert not wants_packed(b"*/*")
    assert not wants_packed(None)


def _reply() -> bytes:
    rows = AnswerRows()
    rows.add("w0", "exact", 1.5, [], 32, 16)
    rows.add("w1", "offline", None, ["CPU"])
    rows.add("w2", "exact", 0.5, [], 32, 16)
    return rows.frame(b'{"position":{}}')


def test_rows_added_in_python_read_back() -> None:
    sources, as_of = read(_reply())
    null = TierMatch(None, None)
    assert full(sources) == {
        "w0": (32, 16, "exact", 1.5, {"GPU": TierMatch(32, 16)}),
        "w1": (None, None, "offline", None, {"GPU": null, "CPU": null}),
        "w2": (32, 16, "exact", 0.5, {"GPU": TierMatch(32, 16)}),
    }
    assert as_of == b'{"position":{}}'


def _with_lengths(body: bytes, **changes: int) -> bytes:
    magic, *lengths = HEADER.unpack_from(body)
    names = ["names", "media", "rows", "tiers", "index", "as_of"]
    for name, value in changes.items():
        lengths[names.index(name)] = value
    return HEADER.pack(magic, *lengths) + body[HEADER.size :]


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda b: b[:10], "header"),
        (lambda b: b"JSON" + b[4:], "header"),
        (lambda b: b + b"x", "header"),
        (lambda b: b[: HEADER.size] + b"[1" + b[HEADER.size + 2 :], "names"),
        (
            lambda b: _with_lengths(
                b, names=len(b'["w0","w1","w2"]') - 1, media=len(b'["CPU"]') + 1
            ),
            "names",
        ),
    ],
)
def test_a_damaged_reply_names_the_part(damage: Any, where: str) -> None:
    with pytest.raises(PackedAnswersError) as caught:
        read(damage(_reply()))
    assert caught.value.where == where


def test_indexes_and_tier_counts_are_checked() -> None:
    body = bytearray(_reply())
    _, names, media, rows, tiers, *_ = HEADER.unpack_from(body)
    index_at = HEADER.size + names + media + rows + tiers
    body[index_at : index_at + 4] = (7).to_bytes(4, "little")  # row 7 of 3
    with pytest.raises(PackedAnswersError, match="out of range"):
        read(bytes(body))
    body = bytearray(_reply())
    tiers_at = HEADER.size + names + media + rows
    no_tiers = bytes(body[:tiers_at]) + bytes(body[tiers_at + tiers :])
    with pytest.raises(PackedAnswersError) as caught:
        read(_with_lengths(no_tiers, tiers=0))
    assert caught.value.where == "tiers"
    assert bytes(body[:4]) == MAGIC


def test_a_reader_reuses_a_names_table_only_while_it_is_the_same() -> None:
    reader = AnswersReader()
    first = AnswerRows()
    first.add("w0", "exact", 0.0, [], 32, 16)
    first.add("w1", "exact", 0.0, [], 16, 16)
    second = AnswerRows()
    second.add("w1", "exact", 0.0, [], 48, 48)
    second.add("w2", "unknown", 2.0, [])
    for rows in (first, second, first):
        expected = full(read(rows.frame(b"{}"))[0])
        assert full(reader.read(rows.frame(b"{}"))[0]) == expected
    assert list(reader.read(second.frame(b"{}"))[0]) == ["w1", "w2"]
