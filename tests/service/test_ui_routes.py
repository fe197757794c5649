"""The web view's routes over real HTTP (httpx against the service's server): the page and its
files as shipped, and ``GET /v1/ui/state`` built from a real follower and the HTTP metrics.
(The page itself runs in a real browser in test_ui_browser.)"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import httpx

from cache import SWAKVAllocator, SWARadixCache
from consumers import Follower
from log import open_log
from swa_es.publish.publisher import Publisher
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_metrics import HttpMetrics
from swa_es.service.http_server import HttpServer
from swa_es.service.metric_table import HTTP_DURATION_BUCKETS_S
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.ui import ASSETS, http_summary
from swa_es.service.views import StandardViews

PAGE = 4


def test_every_shipped_file_is_served_and_every_served_file_is_shipped() -> None:
    folder = resources.files("swa_es.service").joinpath("ui_static")
    shipped = {entry.name for entry in folder.iterdir()} - {"README.md"}
    assert shipped == set(ASSETS)
    readme = folder.joinpath("README.md").read_text()
    assert "uplot@1.6.32" in readme
    assert "/*! https://github.com/leeoniya/uPlot (v1.6.32) */" in (
        folder.joinpath("uPlot.iife.min.js").read_text()
    )


def test_the_summary_counts_the_routing_api_only() -> None:
    metrics = HttpMetrics()
    for seconds in (0.0002, 0.0002, 0.003):
        metrics.answered("/v1/match", 200, seconds)
    metrics.answered("/v1/sources", 503, 0.02)
    metrics.answered("/metrics", 200, 0.5)  # not the routing API
    metrics.answered("other", 200, 0.5)
    summary = http_summary(metrics.families())
    assert summary["requests"] == {"/v1/match": 3, "/v1/sources": 1}
    assert summary["count"] == 4
    assert abs(summary["sum_s"] - 0.0234) < 1e-9
    assert summary["bounds_s"] == list(HTTP_DURATION_BUCKETS_S)
    cumulative = dict(zip([*summary["bounds_s"], "+Inf"], summary["buckets"], strict=True))
    assert cumulative[0.0001] == 0 and cumulative[0.00025] == 2
    assert cumulative[0.0025] == 2 and cumulative[0.005] == 3
    assert cumulative[0.025] == 4 and cumulative["+Inf"] == 4
    assert summary["refusals"] == {"restoring": 1}


async def test_the_page_and_its_state(tmp_path: Path) -> None:
    allocator = SWAKVAllocator(full_size=256, swa_size=128, page_size=PAGE, device="cpu")
    cache = SWARadixCache(allocator, sliding_window_size=8, page_size=PAGE, enable_events=True)
    async with await open_log(f"file://{tmp_path}/log") as log:
        async with Publisher(cache, log, "w0") as publisher:
            tokens = list(range(1, 33))
            value = cache.allocator.alloc(len(tokens))
            assert value is not None
            cache.insert(tokens, value)
            publisher.step()
            await publisher.flush()
        views = StandardViews.create()
        follower = Follower(log, views.all)
        restored = False

        def health() -> tuple[bool, str]:
            return (True, "ok") if restored else (False, "restoring")

        parts = AppParts(registry_of(list), health, routing=FollowerRouting(follower, views))
        async with HttpServer(build_app(parts)) as server, httpx.AsyncClient() as client:
            base = f"http://127.0.0.1:{server.port}"
            reply = await client.get(f"{base}/ui")
            assert reply.status_code == 307 and reply.headers["location"] == "ui/"
            page = await client.get(f"{base}/ui/")
            assert page.status_code == 200
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert 'src="app.js"' in page.text and 'href="data:,"' in page.text  # no favicon
            script = await client.get(f"{base}/ui/app.js")
            assert script.headers["content-type"].startswith("text/javascript")
            assert (await client.get(f"{base}/ui/no-such-file.js")).status_code == 404

            state = (await client.get(f"{base}/v1/ui/state")).json()
            assert state["health"] == {"ok": False, "detail": "restoring"}
            assert state["sources"] is None, "no source read while restoring"
            assert state["quality_route"] == "/v1/quality"

            await follower.catch_up()
            restored = True
            for _ in range(3):
                assert (
                    await client.post(f"{base}/v1/match", json={"token_ids": tokens})
                ).is_success
            sources = (await client.get(f"{base}/v1/sources")).json()["sources"]
            state = (await client.get(f"{base}/v1/ui/state")).json()
            assert state["health"] == {"ok": True, "detail": "ok"}
            assert state["sources"].keys() == sources.keys() == {"w0"}
            shown = state["sources"]["w0"]
            assert shown["state"] == "exact" and shown["blocks"] == sources["w0"]["blocks"] > 0
            assert state["as_of"]["position"] == {"0": follower.position.offsets[0]}
            http = state["http"]
            assert http["requests"]["/v1/match"] == 3
            assert http["requests"]["/v1/sources"] == 1
            assert http["count"] == 4 and http["buckets"][-1] == 4
            assert "/v1/ui/state" not in http["requests"]
