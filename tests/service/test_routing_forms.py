"""Every request form of ``POST /v1/match`` over real HTTP (the service's server on 127.0.0.1, the
real ``swa_es.client`` clients and raw httpx): the same answers as the in-process
``PrefixIndex.match``, batches in order, ``as_of`` that tells fresh from stale, and bad bodies
refused with 400/413/415/431 naming the problem."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgpack
import orjson
import pytest

from cache.events import EventBatch
from consumers import Follower
from log import EventLog, open_log
from swa_es.client import (
    AsyncRoutingClient,
    HashedPrompt,
    Prompt,
    RoutingClient,
    RoutingError,
    RoutingUnavailableError,
    SourceMatch,
    TierMatch,
)
from swa_es.client.answers import parse_tiers
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.match_query import MAX_BATCH_PROMPTS
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews
from tests.consumers.primary_model import PrimaryModel, record

PROMPT = list(range(100, 124))  # 24 tokens: 12 pages of 2, 6 pages of 4
OTHER = [9, 8, 7, 6, 5, 4]
MAX_REQUEST_BYTES = 64 * 1024


def frozen_clock() -> float:
    """The follower's liveness clock, stopped: every answer says ``last_heard_s`` 0.0, so
    answers to the same prompt are byte-equal."""
    return 0.0


@dataclass
class Served:
    """A follower serving the routing API over HTTP, and what it was built from."""

    url: str
    port: int
    log: EventLog
    follower: Follower
    views: StandardViews
    models: dict[str, PrimaryModel]
    health: dict[str, bool]
    parts: AppParts


def _batches(models: dict[str, PrimaryModel]) -> list[EventBatch]:
    """Sources holding PROMPT in different ways (tombstones, prefixes, page sizes, a
    namespace)."""
    a, b, c, d = (models[name] for name in "abcd")
    batches = [m.start_epoch() for m in models.values()]
    batches.append(a.batch(a.store(PROMPT) + a.store(OTHER)))
    hashes = a.hashes(PROMPT)
    batches.append(a.batch(a.tombstone([hashes[2], hashes[10]])))
    batches.append(b.batch(b.store(PROMPT[:10])))
    batches.append(c.batch(c.store(PROMPT)))
    batches.append(d.batch(d.store(PROMPT, extra_key="tenant")))
    return batches


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[Served]:
    """A follower of a log of four sources, serving on a free port."""
    models = {
        "a": PrimaryModel("a", page_size=2, sliding_window_size=4),
        "b": PrimaryModel("b", page_size=2, sliding_window_size=4),
        "c": PrimaryModel("c", page_size=4, sliding_window_size=4),
        "d": PrimaryModel("d", page_size=2, sliding_window_size=4),
    }
    async with await open_log(f"file://{tmp_path}/log") as log:
        await log.append_batch([record(b) for b in _batches(models)])
        views = StandardViews.create()
        follower = Follower(log, views.all, clock=frozen_clock)
        await follower.catch_up()
        health = {"ok": True}
        parts = AppParts(
            registry_of(list),
            lambda: (True, "ok") if health["ok"] else (False, "restoring"),
            routing=FollowerRouting(follower, views),
            max_request_bytes=MAX_REQUEST_BYTES,
        )
        async with HttpServer(build_app(parts)) as server:
            url = f"http://127.0.0.1:{server.port}"
            yield Served(url, server.port, log, follower, views, models, health, parts)


def expected(served: Served, token_ids: Sequence[int], extra_key: str | None = None) -> Any:
    """The in-process answer, in the API's shape."""
    return {
        source: {
            "cached_tokens": found.full_tokens,
            "usable_tokens": found.swa_tokens,
            "state": "exact" if found.known else "unknown",
            "last_heard_s": 0.0,
            "tiers": {
                "GPU": {"cached_tokens": found.full_tokens, "usable_tokens": found.swa_tokens}
            },
        }
        for source, found in served.views.prefix.match(token_ids, extra_key).items()
    }


def typed(answer: Any) -> dict[str, SourceMatch]:
    return {
        name: SourceMatch(**(found | {"tiers": parse_tiers(found["tiers"])}))
        for name, found in answer.items()
    }


QUERIES: list[tuple[list[int], str | None]] = [
    (PROMPT, None),
    (PROMPT[:9], None),
    ([*PROMPT[:3], 1, 2, 3], None),
    (PROMPT, "tenant"),
    (OTHER, None),
    ([424242] * 8, None),
    ([], None),
]


async def test_every_form_answers_as_the_in_process_index(tmp_path: Path) -> None:
    """JSON, binary, msgpack (ids as a list and as bytes) and both clients give the
    in-process answers, which show tombstones, prefixes and namespaces."""
    async with serving(tmp_path) as served:
        full = expected(served, PROMPT)
        assert full["a"] == {
            "cached_tokens": 24,
            "usable_tokens": 20,
            "state": "exact",
            "last_heard_s": 0.0,
            "tiers": {"GPU": {"cached_tokens": 24, "usable_tokens": 20}},
        }
        assert full["b"]["cached_tokens"] == 10 and full["c"]["cached_tokens"] == 24
        assert "d" not in full and expected(served, PROMPT, "tenant")["d"]["cached_tokens"] == 24
        url = served.url + "/v1/match"
        async with httpx.AsyncClient() as raw, AsyncRoutingClient(served.url) as client:
            with RoutingClient(served.url) as blocking:
                for token_ids, extra_key in QUERIES:
                    want = expected(served, token_ids, extra_key)
                    body = {"token_ids": token_ids, "extra_key": extra_key}
                    replies = [
                        await raw.post(url, json=body),
                        await raw.post(
                            url,
                            content=msgpack.packb(body),
                            headers={"content-type": "application/msgpack"},
                        ),
                        await raw.post(
                            url,
                            content=msgpack.packb(
                                {"token_ids": struct.pack(f"<{len(token_ids)}I", *token_ids)}
                                | ({"extra_key": extra_key} if extra_key else {})
                            ),
                            headers={"content-type": "application/x-msgpack"},
                        ),
                        await raw.post(
                            url,
                            params={"extra_key": extra_key} if extra_key else None,
                            content=struct.pack(f"<{len(token_ids)}I", *token_ids),
                            headers={"content-type": "application/octet-stream"},
                        ),
                    ]
                    for reply in replies:
                        assert reply.status_code == 200, reply.text
                        assert reply.json()["sources"] == want, (token_ids, extra_key, reply.text)
                    sync_reply = await anyio.to_thread.run_sync(
                        blocking.match, token_ids, extra_key
                    )
                    assert sync_reply.sources == typed(want)
                    async_reply = await client.match(token_ids, extra_key)
                    assert async_reply.sources == typed(want)


async def test_block_hashes_answer_as_tokens_for_their_page_size(tmp_path: Path) -> None:
    """A prompt sent as its block hashes gets the token form's answers from the sources of that
    page size; the others say page_size_mismatch."""
    async with serving(tmp_path) as served:
        a = served.models["a"]
        async with AsyncRoutingClient(served.url) as client:
            with RoutingClient(served.url) as blocking:
                for token_ids, extra_key in QUERIES:
                    want = {
                        source: answer
                        for source, answer in expected(served, token_ids, extra_key).items()
                        if source != "c"
                    }
                    want["c"] = {
                        "cached_tokens": None,
                        "usable_tokens": None,
                        "state": "page_size_mismatch",
                        "last_heard_s": 0.0,
                        "tiers": {"GPU": {"cached_tokens": None, "usable_tokens": None}},
                    }
                    hashes = a.hashes(token_ids, extra_key)
                    got = await client.match_hashes(hashes, 2)
                    assert got.sources == typed(want), (token_ids, extra_key)
                    got = await anyio.to_thread.run_sync(blocking.match_hashes, hashes, 2)
                    assert got.sources == typed(want)
                    reply = await client._client.post(
                        "/v1/match", json={"block_hashes": hashes, "page_size": 2}
                    )
                    assert reply.json()["sources"] == want
                c_hashes = served.models["c"].hashes(PROMPT)
                got = await client.match_hashes(c_hashes, 4)
                assert got.sources["c"] == SourceMatch(
                    24, 24, "exact", tiers={"GPU": TierMatch(24, 24)}
                )
                assert got.sources["a"].state == "page_size_mismatch"


async def test_batches_are_answered_in_order(tmp_path: Path) -> None:
    """A batch of mixed prompts (tokens, namespaced tokens, hashes) in JSON or msgpack: the
    answers in the order sent, one ``as_of`` for all."""
    async with serving(tmp_path) as served:
        prompts: list[Prompt | HashedPrompt] = [Prompt(t, k) for t, k in QUERIES]
        prompts.append(HashedPrompt(served.models["a"].hashes(PROMPT[:8]), 2))
        wants = [expected(served, t, k) for t, k in QUERIES]
        hashed_want = dict(expected(served, PROMPT[:8]))
        hashed_want["c"] = {
            "cached_tokens": None,
            "usable_tokens": None,
            "state": "page_size_mismatch",
            "last_heard_s": 0.0,
            "tiers": {"GPU": {"cached_tokens": None, "usable_tokens": None}},
        }
        wants.append(hashed_want)
        async with AsyncRoutingClient(served.url) as client:
            reply = await client.match_batch(prompts)
            assert [answer.sources for answer in reply.answers] == [typed(w) for w in wants]
            assert set(reply.as_of.sources) == {"a", "b", "c", "d"}
            body = {"prompts": [{"token_ids": t, "extra_key": k} for t, k in QUERIES]}
            raw = await client._client.post("/v1/match", json=body)
            assert [answer["sources"] for answer in raw.json()["answers"]] == wants[:-1]
        with RoutingClient(served.url) as blocking:
            reply = await anyio.to_thread.run_sync(blocking.match_batch, prompts)
            assert [answer.sources for answer in reply.answers] == [typed(w) for w in wants]


async def test_as_of_tells_a_fresh_answer_from_a_stale_one(tmp_path: Path) -> None:
    """``as_of`` names the follower's log position, each source's last batch, and the lag
    behind the log's end: records appended and not yet read show as lag until caught up."""
    async with serving(tmp_path) as served, AsyncRoutingClient(served.url) as client:
        reply = await client.match(PROMPT)
        for name, model in served.models.items():
            assert reply.as_of.sources[name].epoch == model.epoch
            assert reply.as_of.sources[name].seq == model.seq
        assert reply.as_of.position == served.follower.position.offsets
        assert reply.as_of.lag_records == 0
        b = served.models["b"]
        await served.log.append_batch([record(b.batch(b.store(PROMPT)))])
        await served.follower.refresh_lag()
        stale = await client.match(PROMPT)
        assert stale.as_of.lag_records == 1
        assert stale.sources["b"].cached_tokens == 10
        await served.follower.catch_up()
        fresh = await client.match(PROMPT)
        assert fresh.as_of.lag_records == 0
        assert fresh.as_of.sources["b"].seq == b.seq
        assert fresh.sources["b"].cached_tokens == 24
        assert sum(fresh.as_of.position.values()) == sum(stale.as_of.position.values()) + 1
        sources = await client.sources()
        assert sources["b"]["seq"] == b.seq


BAD_BODIES: list[tuple[str | None, str, bytes, int, str]] = [
    ("application/octet-stream", "", b"\x01\x02\x03\x04\x05", 400, "u32"),
    ("application/octet-stream", "bogus=1", b"", 400, "bogus"),
    ("application/octet-stream", "page_size=0", b"", 400, "page_size"),
    ("application/octet-stream", "page_size=x", b"", 400, "page_size"),
    ("application/octet-stream", "page_size=2", b"\x00" * 12, 400, "i64"),
    ("application/octet-stream", "page_size=2&extra_key=k", b"", 400, "extra_key"),
    ("application/octet-stream", "extra_key=%ff", b"", 400, "query string"),
    ("application/octet-stream", "extra_key=a&extra_key=b", b"", 400, "twice"),
    ("application/json", "extra_key=a", b'{"token_ids": []}', 400, "query parameters"),
    ("application/msgpack", "", b"\xc1", 400, "not msgpack"),
    ("application/msgpack", "", msgpack.packb([1, 2]), 400, "msgpack object"),
    ("application/msgpack", "", msgpack.packb({"token_ids": "x"}), 400, "token_ids"),
    ("application/msgpack", "", msgpack.packb({"token_ids": b"\x00" * 3}), 400, "u32"),
    ("application/msgpack", "", msgpack.packb({"token_ids": [1, -1]}), 400, "token_ids[1]"),
    (None, "", b'{"prompts": []}', 400, "empty"),
    (None, "", b'{"prompts": 3}', 400, "prompts must be a list"),
    (None, "", b'{"prompts": [{"token_ids": [1]}, 5]}', 400, "prompts[1]"),
    (None, "", b'{"prompts": [{"token_ids": [1, "x"]}]}', 400, "prompts[0].token_ids[1]"),
    (None, "", b'{"prompts": [], "x": 1}', 400, "'x'"),
    (None, "", b'{"block_hashes": [1]}', 400, "page_size is required"),
    (None, "", b'{"block_hashes": [1], "page_size": 2, "extra_key": "k"}', 400, "extra_key"),
    (None, "", b'{"block_hashes": [9223372036854775808], "page_size": 2}', 400, "[0]"),
    (None, "", b'{"block_hashes": [1], "page_size": 0}', 400, "page_size"),
    (None, "", b'{"token_ids": [1], "page_size": 2}', 400, "page_size"),
    (None, "", b'{"extra_key": "k"}', 400, "token_ids"),
    ("text/plain", "", b"1 2 3", 415, "text/plain"),
]


async def test_bad_bodies_get_an_error_naming_the_problem(tmp_path: Path) -> None:
    """Each malformed body of each form: its status and a message naming what is wrong; too
    many prompts and too large bodies are refused; the server keeps serving."""
    async with serving(tmp_path) as served:
        url = served.url + "/v1/match"
        async with httpx.AsyncClient() as raw:
            for content_type, query, body, status, needle in BAD_BODIES:
                headers = {} if content_type is None else {"content-type": content_type}
                target = url + ("?" + query if query else "")
                reply = await raw.post(target, content=body, headers=headers)
                assert reply.status_code == status, (content_type, query, body, reply.text)
                assert needle in reply.json()["error"], (needle, reply.json())
            many = {"prompts": [{"token_ids": [1]}] * (MAX_BATCH_PROMPTS + 1)}
            reply = await raw.post(url, content=orjson.dumps(many))
            assert reply.status_code == 400 and str(MAX_BATCH_PROMPTS) in reply.json()["error"]
            big = b"\x00" * (MAX_REQUEST_BYTES + 4)
            reply = await raw.post(
                url, content=big, headers={"content-type": "application/msgpack"}
            )
            assert reply.status_code == 413 and "exceeds" in reply.json()["error"]
            reply = await raw.post(url, content=b"{}", headers={"x-big": "b" * 9000})
            assert reply.status_code == 431
            assert (await raw.post(url, json={"token_ids": [1, 2]})).status_code == 200
        with RoutingClient(served.url) as blocking:
            with pytest.raises(ValueError, match="token ids"):
                blocking.match([1, -1])
            with pytest.raises(RoutingError) as refused:
                await anyio.to_thread.run_sync(blocking.match_hashes, [1], 2**33)
            assert refused.value.status == 400 and "page_size" in refused.value.message


async def test_clients_say_unavailable_while_restoring_then_answer(tmp_path: Path) -> None:
    """503 while restoring becomes ``RoutingUnavailableError`` in both clients; once restored,
    the same client answers."""
    async with serving(tmp_path) as served:
        served.health["ok"] = False
        with RoutingClient(served.url, timeout_s=5) as blocking:
            with pytest.raises(RoutingUnavailableError, match="restoring"):
                await anyio.to_thread.run_sync(blocking.match, PROMPT)
            async with AsyncRoutingClient(served.url) as client:
                with pytest.raises(RoutingUnavailableError):
                    await client.match(PROMPT)
            served.health["ok"] = True
            reply = await anyio.to_thread.run_sync(blocking.match, PROMPT)
            assert reply.sources["a"].cached_tokens == 24


async def test_a_client_survives_a_server_restart(tmp_path: Path) -> None:
    """The blocking client keeps its connection; when the server behind it restarts, the
    next request reconnects (once) and succeeds."""
    views = StandardViews.create()
    async with await open_log(f"file://{tmp_path}/log") as log:
        model = PrimaryModel("w", page_size=2)
        await log.append_batch(
            [record(model.start_epoch()), record(model.batch(model.store(PROMPT)))]
        )
        follower = Follower(log, views.all)
        await follower.catch_up()
        parts = AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
        async with HttpServer(build_app(parts)) as first:
            port = first.port
            blocking = RoutingClient(f"http://127.0.0.1:{port}")
            reply = await anyio.to_thread.run_sync(blocking.match, PROMPT)
            assert reply.sources["w"].cached_tokens == 24
        async with HttpServer(build_app(parts), port=port):
            reply = await anyio.to_thread.run_sync(blocking.match, PROMPT[:4])
            assert reply.sources["w"].cached_tokens == 4
        blocking.close()
