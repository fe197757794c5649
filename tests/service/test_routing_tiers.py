"""Tier-aware answers over real HTTP: a log written through the real codec with GPU stores and
lower-tier stores (``medium`` "CPU", "DISK", a name no engine uses), followed by a real
follower, asked ``POST /v1/match`` by raw httpx and the real ``swa_es.client`` clients, in the
token, block-hash and batch forms. A lower tier answers what it holds without a gap continuing
after the GPU hit; the top-level lengths stay the GPU's."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgpack

from cache.events import EventBatch
from cache.events.liveness import encode_liveness, offline
from consumers import Follower
from log import EventLog, open_log
from swa_es.client import AsyncRoutingClient, HashedPrompt, Prompt, RoutingClient, TierMatch
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews
from tests.consumers.primary_model import record
from tests.consumers.tiered_model import TieredSource

PAGE = 2
PROMPT = list(range(200, 224))  # 24 tokens: 12 pages of 2
NULL = {"cached_tokens": None, "usable_tokens": None}


def tier(cached: int | None, usable: int | None = None) -> dict[str, int | None]:
    """One tier's answer."""
    return {"cached_tokens": cached, "usable_tokens": usable}


def frozen_clock() -> float:
    """The follower's liveness clock, stopped (every ``last_heard_s`` is 0.0)."""
    return 0.0


@dataclass
class Served:
    url: str
    log: EventLog
    follower: Follower
    views: StandardViews
    sources: dict[str, TieredSource]


def _batches(sources: dict[str, TieredSource]) -> list[EventBatch]:
    batches = [s.model.start_epoch() for s in sources.values()]
    gpu, cpu, both, same, odd, gone = (sources[n] for n in sources)
    batches.append(gpu.batch(gpu.model.store(PROMPT[:8])))
    # CPU only, the whole prompt
    batches.append(cpu.batch(cpu.tier_store("CPU", PROMPT, 0)))
    # GPU 4 pages; CPU pages 0..8: continues 4 pages past the GPU; DISK holds page 1 only
    events = [*both.model.store(PROMPT[:8]), *both.tier_store("CPU", PROMPT[:16], 0)]
    events += both.tier_store("DISK", PROMPT[:4], 1)
    batches.append(both.batch(events))
    # GPU 6 pages, CPU the same 6: nothing past the GPU; DISK stored then emptied
    events = [*same.model.store(PROMPT[:12]), *same.tier_store("CPU", PROMPT[:12], 0)]
    events += same.tier_store("DISK", PROMPT[:12], 5)
    batches.append(same.batch(events))
    batches.append(same.batch(same.tier_remove("DISK", same.hashes(PROMPT[:12])[5:])))
    # a medium no engine names: kept under its own name, a gap at page 3
    events = odd.tier_store("NVME_X", PROMPT[:6], 0) + odd.tier_store("NVME_X", PROMPT, 4)
    batches.append(odd.batch(events))
    batches.append(gone.batch(gone.model.store(PROMPT) + gone.tier_store("CPU", PROMPT, 0)))
    return batches


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[Served]:
    names = ["gpu", "cpu", "both", "same", "odd", "gone"]
    sources = {name: TieredSource(name) for name in names}
    async with await open_log(f"file://{tmp_path}/log") as log:
        await log.append_batch([record(b) for b in _batches(sources)])
        gone = sources["gone"].model
        await log.append("gone", encode_liveness(offline("gone", gone.epoch, gone.seq, "stopped")))
        views = StandardViews.create()
        follower = Follower(log, views.all, clock=frozen_clock)
        await follower.catch_up()
        parts = AppParts(
            registry_of(list),
            lambda: (True, "ok"),
            routing=FollowerRouting(follower, views),
            max_request_bytes=64 * 1024,
        )
        async with HttpServer(build_app(parts)) as server:
            yield Served(f"http://127.0.0.1:{server.port}", log, follower, views, sources)


def answer(cached: int | None, usable: int | None, state: str, **tiers: Any) -> dict[str, Any]:
    return {
        "cached_tokens": cached,
        "usable_tokens": usable,
        "state": state,
        "last_heard_s": 0.0,
        "tiers": {"GPU": tier(cached, usable), **tiers},
    }


EXPECTED = {
    "gpu": answer(8, 8, "exact"),
    "cpu": answer(0, 0, "exact", CPU=tier(24)),
    "both": answer(8, 8, "exact", CPU=tier(8), DISK=tier(0)),
    "same": answer(12, 12, "exact", CPU=tier(0), DISK=tier(0)),
    "odd": answer(0, 0, "exact", NVME_X=tier(6)),
    "gone": answer(None, None, "offline", CPU=NULL),
}


async def test_tiers_answer_from_the_gpu_hit_on_in_every_form(tmp_path: Path) -> None:
    """GPU only, CPU only, both, CPU continuing past the GPU, CPU only as far as the GPU
    (0), an emptied tier (0), an unknown medium kept under its name, an offline source (null):
    the same in JSON, msgpack, binary, the block-hash form, a batch and both clients."""
    async with serving(tmp_path) as served:
        for source in EXPECTED:
            if source != "gone":
                assert served.follower.diverged().get(source) is None, source
        url = served.url + "/v1/match"
        async with httpx.AsyncClient() as raw:
            reply = await raw.post(url, json={"token_ids": PROMPT})
            assert reply.status_code == 200, reply.text
            assert reply.json()["sources"] == EXPECTED
            packed = await raw.post(
                url,
                content=msgpack.packb({"token_ids": PROMPT}),
                headers={"content-type": "application/msgpack"},
            )
            assert packed.json()["sources"] == EXPECTED
            binary = await raw.post(
                url,
                content=struct.pack(f"<{len(PROMPT)}I", *PROMPT),
                headers={"content-type": "application/octet-stream"},
            )
            assert binary.json()["sources"] == EXPECTED
            hashes = served.sources["gpu"].hashes(PROMPT)
            by_hash = await raw.post(url, json={"block_hashes": hashes, "page_size": PAGE})
            assert by_hash.json()["sources"] == EXPECTED
            batch = await raw.post(
                url, json={"prompts": [{"token_ids": PROMPT}, {"token_ids": PROMPT[:8]}]}
            )
            first, second = (found["sources"] for found in batch.json()["answers"])
            assert first == EXPECTED
            # the first 4 pages: "both" has nothing on CPU past its GPU hit of 4 pages
            assert second["both"]["tiers"]["CPU"] == tier(0)
            assert second["cpu"]["tiers"]["CPU"] == tier(8)
            sources = (await raw.get(served.url + "/v1/sources")).json()["sources"]
            assert sources["both"]["tiers"] == {"GPU": 4, "CPU": 8, "DISK": 1}
            assert sources["same"]["tiers"] == {"GPU": 6, "CPU": 6, "DISK": 0}
            assert sources["odd"]["tiers"] == {"GPU": 0, "NVME_X": 11}
        with RoutingClient(served.url) as client:
            typed = (await anyio.to_thread.run_sync(client.match, PROMPT)).sources
        assert typed["both"].tiers == {
            "GPU": TierMatch(8, 8),
            "CPU": TierMatch(8, None),
            "DISK": TierMatch(0, None),
        }
        assert typed["cpu"].tier_tokens("CPU") == 24 and typed["cpu"].tier_tokens("DISK") == 0
        weights = {"GPU": 1.0, "CPU": 0.75, "DISK": 0.25}
        assert typed["both"].weighted_tokens(weights) == 8 + 0.75 * 8
        assert typed["gone"].tiers["CPU"] == TierMatch(None, None)
        async with AsyncRoutingClient(served.url) as async_client:
            reply_batch = await async_client.match_batch(
                [Prompt(PROMPT), HashedPrompt(served.sources["gpu"].hashes(PROMPT), PAGE)]
            )
        assert [a.sources for a in reply_batch.answers] == [typed, typed]
        tiers = {name: found.tiers for name, found in typed.items()}
        assert [
            {name: found.tiers for name, found in a.sources.items()} for a in reply_batch.answers
        ] == [tiers, tiers]
        assert tiers["odd"] == {"GPU": TierMatch(0, 0), "NVME_X": TierMatch(6, None)}


async def test_an_unknown_source_answers_null_in_every_tier_and_a_miss_leaves_tiers_out(
    tmp_path: Path,
) -> None:
    """A source whose stream has a gap is unknown: null lengths in the GPU and each lower tier;
    a prompt no tier holds leaves the (known) sources out."""
    async with serving(tmp_path) as served:
        both = served.sources["both"]
        both.model.seq += 1  # a lost batch
        await served.log.append(*record(both.batch([])))
        await served.follower.catch_up()
        async with httpx.AsyncClient() as raw:
            reply = await raw.post(served.url + "/v1/match", json={"token_ids": PROMPT})
            assert reply.json()["sources"]["both"] == answer(
                None, None, "unknown", CPU=NULL, DISK=NULL
            )
            miss = await raw.post(served.url + "/v1/match", json={"token_ids": [7] * 8})
            assert miss.json()["sources"] == {
                "gone": EXPECTED["gone"],
                "both": answer(None, None, "unknown", CPU=NULL, DISK=NULL),
            }
