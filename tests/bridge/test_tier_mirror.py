"""The mirror's tier book with engine events built here (sglang's shapes: self-describing tier
stores, one removal per radix node): sglang's media names, an unknown medium kept under its own
name, reasons split per block, the bounded memory of removed blocks, groups declared late,
snapshots and counters. Every step's events go to a native replica, which must apply them and
end with the mirror's digest."""

from __future__ import annotations

import logging

import msgpack
import pytest
from prometheus_client import generate_latest

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
from swa_es.bridge.formats import (
    EngineCleared,
    EngineEvent,
    EngineRemoved,
    EngineStored,
    WireFormat,
    decode_batch,
)
from swa_es.bridge.mirror import MirrorCache
from swa_es.bridge.pages import Page
from swa_es.bridge.tiers import RecentPages, lower_than
from swa_es.service.service_metrics import bridge_families, registry_of

PAGE = 2
TOKENS = tuple(range(1, 9))  # four pages: engine keys 1..4
OURS = chain_block_hashes(namespace_prior(None), TOKENS, PAGE)


def page_tokens(key: int) -> tuple[int, ...]:
    return TOKENS[(key - 1) * PAGE : key * PAGE]


def store(key: int, medium: str | None = "GPU") -> EngineStored:
    """sglang's store of one page (key k under key k - 1)."""
    return EngineStored((key,), key - 1 or None, page_tokens(key), PAGE, medium)


class Followed(MirrorCache):
    """A mirror whose every step's events a native replica applies (then with its digest)."""

    def __init__(self, recent_pages: int = 65_536) -> None:
        super().__init__(recent_pages=recent_pages)
        self.replicas = ReplicaSet()
        self.seq = 0

    def step(self, *events: EngineEvent) -> list[Event]:
        """``events`` applied as one engine batch; our events."""
        for event in events:
            self.apply(event)
        taken = self.take_events()
        opening: tuple[Event, ...] = (AllBlocksCleared(),) if self.seq == 0 else ()
        meta = self.meta() if self.seq == 0 else None
        self.replicas.apply(EventBatch("sg", "e", self.seq, 0.0, (*opening, *taken), meta=meta))
        self.seq += 1
        assert self.replicas["sg"].state_digest() == self.state_digest()
        return taken


def tier(key: int, medium: str) -> BlockStored:
    return BlockStored(
        (OURS[key - 1],), OURS[key - 2] if key > 1 else None, page_tokens(key), PAGE, medium=medium
    )


def test_sglang_media_names_are_kept_and_ranked() -> None:
    mirror = Followed()
    mirror.step(*(store(key) for key in (1, 2, 3)))
    # sglang's HiCache: backed up to host memory, then to disk
    events = mirror.step(store(1, "CPU_PINNED"), store(2, "CPU_PINNED"), store(1, "DISK"))
    assert events == [tier(1, "CPU_PINNED"), tier(2, "CPU_PINNED"), tier(1, "DISK")]
    assert mirror.tiers.media == ("CPU_PINNED", "DISK")
    # host memory frees both: 1 still on disk (demoted), 2 gone (evicted), deepest first
    events = mirror.step(EngineRemoved((1, 2), "CPU_PINNED"))
    assert events == [
        BlockRemoved((OURS[1],), "CPU_PINNED", "evicted"),
        BlockRemoved((OURS[0],), "CPU_PINNED", "demoted"),
    ]
    assert lower_than("EXTERNAL", "DISK") and not lower_than("CPU", "CPU_PINNED")
    assert mirror.tiers.counters.unknown_medium_events == 0


def test_a_gpu_node_removal_is_split_by_reason_parents_last() -> None:
    mirror = Followed()
    mirror.step(EngineStored((1, 2, 3), None, TOKENS[:6], PAGE, "GPU"))
    mirror.step(store(1, "CPU_PINNED"), store(3, "CPU_PINNED"))
    events = mirror.step(EngineRemoved((1, 2, 3), "GPU"))
    assert events == [
        BlockRemoved((OURS[2],), "GPU", "demoted"),
        BlockRemoved((OURS[1],), "GPU", "evicted"),
        BlockRemoved((OURS[0],), "GPU", "demoted"),
    ]
    assert len(mirror) == 0


def test_an_unknown_medium_is_kept_under_its_name(caplog: pytest.LogCaptureFixture) -> None:
    mirror = Followed()
    mirror.step(store(1))
    with caplog.at_level(logging.WARNING):
        events = mirror.step(store(1, "NVME_POOL"), EngineRemoved((1,), "GPU"))
    assert events == [tier(1, "NVME_POOL"), BlockRemoved((OURS[0],), "GPU", "demoted")]
    assert mirror.tiers.media == ("NVME_POOL",) and len(mirror) == 0
    counters = mirror.tiers.counters
    assert counters.unknown_medium_events == 1
    assert counters.pages[("NVME_POOL", "stored")] == 1
    assert "NVME_POOL" in caplog.text
    # never taken for the GPU: a GPU match finds nothing, a lower tier is unranked
    assert mirror.our_hash(1) is None and not lower_than("NVME_POOL", "CPU")


def test_sglang_frames_with_media_decode_and_place() -> None:
    """sglang 0.5.16's positional events: ``medium`` is the store's seventh field and the
    removal's third."""
    payload = msgpack.packb(
        [
            0.0,
            [
                ["BlockStored", [1], None, list(page_tokens(1)), PAGE, None, "GPU"],
                ["BlockStored", [1], None, list(page_tokens(1)), PAGE, None, "CPU_PINNED"],
                ["BlockRemoved", [1], "GPU"],
            ],
        ]
    )
    mirror = Followed()
    events = mirror.step(*decode_batch(payload, WireFormat.SGLANG).events)
    assert events[1:] == [tier(1, "CPU_PINNED"), BlockRemoved((OURS[0],), "GPU", "demoted")]


def test_the_memory_of_removed_blocks_is_bounded() -> None:
    mirror = Followed(recent_pages=1)
    mirror.step(store(1), store(2))
    mirror.step(EngineRemoved((2,), "GPU"), EngineRemoved((1,), "GPU"))  # 2 forgotten
    placeholder = EngineStored((2,), None, (), 0, "CPU")
    assert mirror.step(placeholder, EngineStored((1,), None, (), 0, "CPU")) == [tier(1, "CPU")]
    assert mirror.tiers.counters.unplaced_tier_blocks == 1
    memory = RecentPages(2)
    for key in (1, 2, 3):
        memory.remember(key, Page(key, None, (), b""))
    assert len(memory) == 2 and memory.get(1) is None and memory.get(3) is not None


def test_a_full_group_declared_later_unholds_tier_blocks() -> None:
    """vLLM shapes: a block is on the CPU while every full-attention group holds it there."""

    def grouped(key: int, group: int, medium: str = "GPU") -> EngineStored:
        tokens = page_tokens(key) if medium == "GPU" else ()
        size = PAGE if medium == "GPU" else 0
        return EngineStored(
            (key,),
            None,
            tokens,
            size,
            medium,
            group_idx=group,
            group_kind="full_attention" if medium == "GPU" else None,
        )

    mirror = Followed()
    mirror.step(grouped(1, 0))
    assert mirror.step(grouped(1, 0, "CPU")) == [tier(1, "CPU")]
    events = mirror.step(grouped(1, 2))  # a second full group: held on GPU and CPU by neither
    assert BlockRemoved((OURS[0],), "CPU", "evicted") in events
    assert not mirror.tiers.media
    assert mirror.step(grouped(1, 2, "CPU")) == [tier(1, "CPU")]


def test_snapshots_and_clears_carry_the_tiers() -> None:
    mirror = Followed()
    mirror.step(store(1), store(2), store(2, "CPU_PINNED"), store(2, "DISK"))
    snapshot = mirror.snapshot_events()
    assert snapshot[2:] == [tier(2, "CPU_PINNED"), tier(2, "DISK")]
    mirror.step(EngineCleared())
    assert not mirror.tiers.media and mirror.snapshot_events() == []
    assert mirror.tiers.counters.as_dict() == {
        "unplaced_tier_blocks": 0,
        "unplaced_tier_removals": 0,
        "repeated_tier_stores": 0,
        "tier_other_group": 0,
        "unknown_medium_events": 0,
    }


def test_tier_counters_are_exported_per_medium() -> None:
    """What ``swa-es bridge`` serves at ``/metrics``: the totals, and pages per medium and
    outcome."""
    mirror = Followed()
    mirror.step(store(1), store(1, "CPU_PINNED"), EngineStored((9,), None, (), 0, "CPU"))
    counters = mirror.tiers.counters
    text = generate_latest(
        registry_of(lambda: bridge_families("sg", counters.as_dict(), None, counters.pages))
    ).decode()
    assert 'swa_es_bridge_unplaced_tier_blocks_total{source="sg"} 1.0' in text
    assert (
        'swa_es_bridge_tier_pages_total{medium="CPU_PINNED",outcome="stored",source="sg"} 1.0'
        in text
    )
    assert 'swa_es_bridge_tier_pages_total{medium="CPU",outcome="unplaced",source="sg"} 1.0' in text
