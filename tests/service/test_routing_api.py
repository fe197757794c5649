"""The routing API over real HTTP (httpx against HttpServer): answers equal PrefixIndex.match."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from cache import SWAKVAllocator, SWARadixCache
from consumers import Follower
from log import open_log
from swa_es.publish.publisher import Publisher
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer, bind_listener
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews

PAGE = 4


def make_cache() -> SWARadixCache:
    allocator = SWAKVAllocator(full_size=256, swa_size=128, page_size=PAGE, device="cpu")
    return SWARadixCache(allocator, sliding_window_size=8, page_size=PAGE, enable_events=True)


async def test_match_sources_and_bad_requests(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """/v1/match equals the in-process PrefixIndex; bad bodies get 400/413; 503 while
    restoring."""
    cache = make_cache()
    prompt = list(range(1, 33))
    other = [7] * 16
    async with await open_log(f"file://{tmp_path}/log") as log:
        async with Publisher(cache, log, "w0") as publisher:
            for tokens in (prompt, other):
                value = cache.allocator.alloc(len(tokens))
                assert value is not None
                cache.insert(tokens, value)
                publisher.step()
            await publisher.flush()
        views = StandardViews.create()
        follower = Follower(log, views.all)
        state = {"restored": False}

        def health() -> tuple[bool, str]:
            return (True, "ok") if state["restored"] else (False, "restoring")

        parts = AppParts(
            registry_of(list),
            health,
            routing=FollowerRouting(follower, views),
            max_request_bytes=4096,
        )
        async with HttpServer(build_app(parts)) as server, httpx.AsyncClient() as client:
            base = f"http://127.0.0.1:{server.port}"
            body = {"token_ids": prompt[:20], "extra_key": None}
            reply = await client.post(f"{base}/v1/match", json=body)
            assert reply.status_code == 503 and "restoring" in reply.json()["error"]
            await follower.catch_up()
            state["restored"] = True
            reply = await client.post(f"{base}/v1/match", json=body)
            assert reply.status_code == 200
            expected = views.prefix.match(prompt[:20])
            as_of = reply.json().pop("as_of")
            assert as_of["sources"]["w0"]["seq"] == follower.cursors.get("w0").seq  # type: ignore[union-attr]
            assert as_of["position"] == {str(p): o for p, o in follower.position.offsets.items()}
            assert {k: v for k, v in reply.json().items() if k != "as_of"} == {
                "sources": {
                    "w0": {
                        "cached_tokens": expected["w0"].full_tokens,
                        "usable_tokens": expected["w0"].swa_tokens,
                        "state": "exact",
                        "last_heard_s": reply.json()["sources"]["w0"]["last_heard_s"],
                        "tiers": {
                            "GPU": {
                                "cached_tokens": expected["w0"].full_tokens,
                                "usable_tokens": expected["w0"].swa_tokens,
                            }
                        },
                    }
                }
            }
            assert reply.json()["sources"]["w0"]["cached_tokens"] == 20
            miss = await client.post(f"{base}/v1/match", json={"token_ids": [999] * 8})
            assert miss.json()["sources"] == {}
            sources = (await client.get(f"{base}/v1/sources")).json()["sources"]
            assert sources["w0"]["blocks"] == (len(prompt) + len(other)) // PAGE
            assert sources["w0"]["tiers"] == {"GPU": sources["w0"]["blocks"]}
            assert sources["w0"]["state"] == "exact"
            assert sources["w0"]["digest"] == cache.state_digest()
            for bad, needle in (
                (b"{not json", "not JSON"),
                (b"[1, 2]", "JSON object"),
                (b'{"token_ids": [1, -2]}', "token_ids[1]"),
                (b'{"token_ids": [1, "x"]}', "token_ids[1]"),
                (b'{"token_ids": 5}', "token_ids must be a list"),
                (b'{"token_ids": [1], "extra_key": 3}', "extra_key"),
                (b'{"token_ids": [1], "bogus": 1}', "bogus"),
                (b'{"token_ids": [4294967296]}', "token_ids[0]"),
                (b'{"token_ids": [1, true]}', "token_ids[1]"),
                (b'{"token_ids": [1, 2.0]}', "token_ids[1]"),
            ):
                reply = await client.post(f"{base}/v1/match", content=bad)
                assert reply.status_code == 400, bad
                assert needle in reply.json()["error"], (bad, reply.json())
            big = {"token_ids": list(range(2000))}
            reply = await client.post(f"{base}/v1/match", json=big)
            assert reply.status_code == 413
            assert (await client.get(f"{base}/v1/match")).status_code == 405


@pytest.mark.parametrize("host", ["127.0.0.1"])
async def test_http_server_reports_the_bound_port(host: str) -> None:
    """Port 0 binds a free port that the server reports, and it answers there."""
    app = build_app(AppParts(registry_of(list), lambda: (True, "ok")))
    async with HttpServer(app, host=host, port=0) as server, httpx.AsyncClient() as client:
        assert server.port > 0
        reply = await client.get(f"http://{host}:{server.port}/healthz")
        assert reply.text == "ok\n"


async def test_accepted_connections_have_nagle_off() -> None:
    """Connections accepted from the server's listener get TCP_NODELAY from asyncio (without
    it every response waited ~40 ms for the client's delayed ACK)."""
    listener = bind_listener("127.0.0.1", 0)
    nodelay: asyncio.Queue[int] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = writer.get_extra_info("socket")
        await nodelay.put(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_connect, sock=listener)
    async with server:
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(nodelay.get(), 10) != 0
        writer.close()
