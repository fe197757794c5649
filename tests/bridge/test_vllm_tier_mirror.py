"""vLLM 0.33.0's offload-tier events through the decoder and the mirror: batches built by vLLM's
own event classes and its ``OffloadingEventsTracker`` (``tests/bridge/vllm_tier_frames.py`` in
bench/.venv-vllm), in its default form (a CPU store is a placeholder: one hash, no tokens, no
parent, block size 0) and its self-describing form. A store is placed on our block by hash
(held on the GPU, on a tier, or recently removed), a removal gets its reason, a store the
bridge cannot place is counted and the batch is kept, with the GPU prefix intact."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    EventBatch,
    chain_block_hashes,
    namespace_prior,
)
from consumers import ReplicaSet
from log import open_log
from swa_es.bridge.formats import WireFormat, decode_batch
from swa_es.bridge.ingest import Bridge
from swa_es.bridge.mirror import MirrorCache, MirrorError
from tests.bridge.waiting import wait_until
from tests.peers.sglang_venv import ROOT, require_vllm

pytestmark = pytest.mark.vllm

BLOCK = 4
TOKENS = list(range(100, 100 + 4 * BLOCK))  # four blocks, vLLM keys 1..4
OURS = chain_block_hashes(namespace_prior(None), TOKENS, BLOCK)  # our hashes of blocks 1..4
FRAMES = Path(__file__).with_name("vllm_tier_frames.py")


def tokens_of(keys: list[int]) -> list[int]:
    """The tokens of vLLM keys (key k is block k - 1 of ``TOKENS``)."""
    return [t for key in keys for t in TOKENS[(key - 1) * BLOCK : key * BLOCK]]


def gpu_store(keys: list[int], parent: int | None, group: int = 0) -> dict[str, Any]:
    tokens = tokens_of(keys)
    kind = "full_attention" if group != 1 else "sliding_window"
    step: dict[str, Any] = {
        "gpu_store": keys,
        "parent": parent,
        "tokens": tokens,
        "block_size": BLOCK,
        "group": group,
        "kind": kind,
    }
    if group == 1:
        step["window"] = 2 * BLOCK
    return step


def gpu_remove(*keys: int) -> dict[str, Any]:
    return {"gpu_remove": list(keys), "group": 0}


def offload(
    *keys: int, medium: str = "CPU", removed: bool = False, group: int = 0
) -> dict[str, Any]:
    return {"offload": [[key, group] for key in keys], "medium": medium, "removed": removed}


def described(
    keys: list[int], parent: int | None, medium: str = "CPU", tokens: list[int] | None = None
) -> dict[str, Any]:
    """A self-describing store (``tokens``: other than the keys' own)."""
    step = gpu_store(keys, parent)
    del step["gpu_store"], step["kind"]
    return {**step, "described": keys, "medium": medium, "tokens": tokens or tokens_of(keys)}


SCENARIOS: dict[str, list[list[dict[str, Any]]]] = {
    "placed_by_hash": [[gpu_store([1, 2, 3, 4], None)], [offload(2, 1)]],
    "demoted_in_one_batch": [
        [gpu_store([1, 2, 3], None)],
        [gpu_remove(3), offload(3)],  # vLLM's batch: GPU events first, then the connector's
        [offload(2)],
        [gpu_remove(2)],  # already on the CPU
        [gpu_remove(1)],  # on no tier
    ],
    "unknown_hash": [
        [gpu_store([1, 2], None)],
        [offload(99), gpu_store([3], 2), offload(99, removed=True)],
    ],
    "self_describing": [
        [gpu_store([1, 2], None)],
        [described([3, 4], 2), described([3], 2, medium="STORAGE")],
        # vLLM re-announces a hash a later chunk covers again; a parent the bridge never saw
        [described([4], 3), described([9], 77, tokens=tokens_of([1]))],
    ],
    "cpu_removal": [
        [gpu_store([1, 2], None)],
        [offload(1, 2), offload(2, medium="STORAGE")],
        [offload(1, 2, removed=True)],  # 2 is still on STORAGE: demoted; 1 evicted
        [offload(2, medium="STORAGE", removed=True)],
    ],
    "cleared": [[gpu_store([1, 2], None), offload(1, 2)], [{"clear": True}], [offload(1)]],
    "hybrid": [
        [gpu_store([1, 2], None), gpu_store([1, 2], None, group=1)],
        [offload(1, 2), offload(2, group=1)],
    ],
    "tokens_contradict": [[gpu_store([1, 2], None)], [described([2], 1, tokens=tokens_of([3]))]],
}


@pytest.fixture(scope="module")
def frames() -> dict[str, list[bytes]]:
    """Every scenario's batches as vLLM encodes them."""
    python = require_vllm()
    request = json.dumps({"scenarios": SCENARIOS})
    done = subprocess.run(
        [str(python), str(FRAMES)],
        input=request,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: [bytes.fromhex(f) for f in batch] for name, batch in reply["frames"].items()}


def run(mirror: MirrorCache, payloads: list[bytes]) -> list[list[Event]]:
    """Each batch applied and its events taken (as the bridge does)."""
    taken: list[list[Event]] = []
    for payload in payloads:
        for event in decode_batch(payload, WireFormat.VLLM).events:
            mirror.apply(event)
        taken.append(mirror.take_events())
    return taken


def cpu(*indexes: int, medium: str = "CPU") -> BlockStored:
    """Our tier store of blocks ``indexes`` (1-based, a chain)."""
    first = indexes[0] - 1
    return BlockStored(
        tuple(OURS[i - 1] for i in indexes),
        None if first == 0 else OURS[first - 1],
        tuple(TOKENS[first * BLOCK : (first + len(indexes)) * BLOCK]),
        BLOCK,
        medium=medium,
    )


def test_placeholders_are_placed_by_hash(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache()
    _, stores = run(mirror, frames["placed_by_hash"])
    assert stores == [cpu(2), cpu(1)]
    assert {event.medium for event in stores if isinstance(event, BlockStored)} == {"CPU"}
    assert mirror.tiers.holds("CPU", OURS[0]) and not mirror.tiers.holds("CPU", OURS[2])
    assert mirror.tiers.counters.unplaced_tier_blocks == 0


def test_a_gpu_removal_then_a_cpu_store_is_a_demotion(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache()
    taken = run(mirror, frames["demoted_in_one_batch"])
    assert taken[1] == [BlockRemoved((OURS[2],), reason="demoted"), cpu(3)]
    assert taken[2] == [cpu(2)]
    assert taken[3] == [BlockRemoved((OURS[1],), reason="demoted")]
    assert taken[4] == [BlockRemoved((OURS[0],), reason="evicted")]
    pages = mirror.tiers.counters.pages
    assert pages[("GPU", "removed_demoted")] == 2 and pages[("GPU", "removed_evicted")] == 1


def test_an_unknown_hash_is_counted_and_the_batch_kept(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache()
    _, second = run(mirror, frames["unknown_hash"])
    assert second == [BlockStored((OURS[2],), OURS[1], tuple(TOKENS[8:12]), BLOCK)]
    counters = mirror.tiers.counters
    assert counters.unplaced_tier_blocks == 1 and counters.unplaced_tier_removals == 1
    assert counters.pages[("CPU", "unplaced")] == 1
    assert len(mirror) == 3 and not mirror.tiers.media


def test_self_describing_stores_are_hashed_our_way(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache(recent_pages=0)
    _, second, third = run(mirror, frames["self_describing"])
    assert second == [cpu(3, 4), cpu(3, medium="STORAGE")]
    counters = mirror.tiers.counters
    assert third == [] and counters.repeated_tier_stores == counters.unplaced_tier_blocks == 1


def test_tier_removals_and_their_reasons(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache()
    taken = run(mirror, frames["cpu_removal"])
    assert taken[2] == [  # one vLLM removal split by reason, the deepest run first
        BlockRemoved((OURS[1],), medium="CPU", reason="demoted"),
        BlockRemoved((OURS[0],), medium="CPU", reason="evicted"),
    ]
    assert taken[3] == [BlockRemoved((OURS[1],), medium="STORAGE", reason="evicted")]
    assert not mirror.tiers.media


def test_all_blocks_cleared_empties_every_tier(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache()
    first, clear, again = frames["cleared"]
    assert run(mirror, [first, clear])[1] == [AllBlocksCleared()]
    assert not mirror.tiers.media and len(mirror) == 0
    assert run(mirror, [again]) == [[cpu(1)]]  # the engine's hash keeps its meaning within its run
    assert [e for e in mirror.snapshot_events() if isinstance(e, BlockStored)] == [cpu(1)]


def test_tier_events_of_a_sliding_window_group_are_counted(
    frames: dict[str, list[bytes]],
) -> None:
    mirror = MirrorCache()
    _, second = run(mirror, frames["hybrid"])
    assert second == [cpu(1), cpu(2)]
    assert mirror.tiers.counters.tier_other_group == 1


def test_a_store_contradicting_a_known_block_is_an_error(frames: dict[str, list[bytes]]) -> None:
    mirror = MirrorCache()
    first, second = frames["tokens_contradict"]
    run(mirror, [first])
    with pytest.raises(MirrorError) as caught:
        run(mirror, [second])
    assert caught.value.field == "block_hashes[0]"


async def test_a_running_bridge_keeps_the_gpu_prefix_past_unknown_cpu_stores(
    tmp_path: Path, frames: dict[str, list[bytes]]
) -> None:
    """The issue's failure: a batch with a CPU placeholder of an unknown block no longer makes
    the source unknown; the bridge counts it."""
    endpoint = f"ipc://{tmp_path}/engine.pub"
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    pub.bind(endpoint)
    first, second = frames["unknown_hash"]
    try:
        async with (
            await open_log(f"file://{tmp_path}/log") as log,
            Bridge(log, endpoint=endpoint, source="vt", wire_format="vllm") as bridge,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(bridge.run)
            with anyio.fail_after(30):
                while bridge.metrics.received == 0:  # the slow joiner
                    await pub.send_multipart([b"", (0).to_bytes(8, "big"), first])
                    await anyio.sleep(0.05)
                await pub.send_multipart([b"", (1).to_bytes(8, "big"), second])
                await wait_until(lambda: bridge.metrics.batches_applied == 2, bridge=bridge)
            assert bridge.lost is None and bridge.metrics.unknown == 0
            assert len(bridge.mirror) == 3
            assert bridge.mirror.tiers.counters.unplaced_tier_blocks == 1
            tasks.cancel_scope.cancel()
    finally:
        pub.close(linger=0)
        context.term()


@pytest.mark.parametrize("name", [name for name in SCENARIOS if name != "tokens_contradict"])
def test_a_follower_applies_the_bridges_tier_events(
    frames: dict[str, list[bytes]], name: str
) -> None:
    """The native replica applies each batch the mirror makes without a consistency error and
    ends with the mirror's digest and tier sets; so does one opened from the mirror's
    snapshot."""
    mirror = MirrorCache()
    replicas = ReplicaSet()
    for seq, payload in enumerate(frames[name]):
        (events,) = run(mirror, [payload])
        opening: tuple[Event, ...] = (AllBlocksCleared(),) if seq == 0 else ()
        meta = mirror.meta() if seq == 0 else None
        replicas.apply(EventBatch("vt", "e", seq, 0.0, (*opening, *events), meta=meta))
        assert replicas["vt"].state_digest() == mirror.state_digest()
    reopened = ReplicaSet()
    snapshot = (AllBlocksCleared(), *mirror.snapshot_events())
    reopened.apply(EventBatch("vt", "e", 0, 0.0, snapshot, meta=mirror.meta()))
    assert reopened["vt"].state_digest() == mirror.state_digest()
    for medium in ("CPU", "STORAGE"):
        for our_hash in OURS:
            held = mirror.tiers.holds(medium, our_hash)
            assert replicas.store.tier_holds("vt", medium, our_hash) == held
            assert reopened.store.tier_holds("vt", medium, our_hash) == held
