"""sglang 0.5.16's own tier events through the decoder, the mirror and a native replica: batches
published by sglang's ``ZmqEventPublisher`` with its own event classes
(``tests/peers/engine_publisher_frames.py`` in bench/.venv-sglang), the way its HiCache records
them (one ``BlockStored`` per page with its tokens and parent, ``medium`` ``CPU_PINNED`` for
host memory and ``DISK``; one ``BlockRemoved`` per radix node). The media keep their names, and
each removal says why, split where its pages differ."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

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
from swa_es.bridge.formats import WireFormat, decode_batch
from swa_es.bridge.mirror import MirrorCache
from tests.peers.sglang_venv import ROOT, require_sglang

pytestmark = pytest.mark.sglang

PAGE = 4
TOKENS = list(range(500, 500 + 3 * PAGE))  # three pages: sglang keys 1, 2, 3
OURS = chain_block_hashes(namespace_prior(None), TOKENS, PAGE)


def stored(keys: list[int], medium: str) -> dict[str, Any]:
    first = keys[0] - 1
    return {
        "type": "BlockStored",
        "block_hashes": keys,
        "parent_block_hash": first or None,
        "token_ids": TOKENS[first * PAGE : (first + len(keys)) * PAGE],
        "block_size": PAGE,
        "lora_id": None,
        "medium": medium,
    }


def removed(keys: list[int], medium: str) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": keys, "medium": medium}


BATCHES = [
    [stored([1, 2, 3], "GPU")],
    [stored([1, 2], "CPU_PINNED"), stored([1], "DISK")],  # backed up to host, then to disk
    [removed([1, 2, 3], "GPU")],  # the node leaves the GPU
    [removed([1, 2], "CPU_PINNED")],  # and host memory
]


def sglang_payloads(tmp_path: Path) -> list[bytes]:
    """``BATCHES`` as sglang's own publisher sends them (its replay from seq 0)."""
    request = {
        "topic": "sg",
        "batches": [{"ts": float(i), "events": events} for i, events in enumerate(BATCHES)],
        "replay_from": [0],
    }
    done = subprocess.run(
        [
            *(str(require_sglang()), "-W", "ignore", "-m", "tests.peers.engine_publisher_frames"),
            *("--engine", "sglang", "--endpoint", f"ipc://{tmp_path}/engine.pub"),
            *("--replay-endpoint", f"ipc://{tmp_path}/engine.replay"),
        ],
        cwd=ROOT,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (reply,) = json.loads(done.stdout.splitlines()[-1])["replies"]
    return [bytes.fromhex(message[-1]) for message in reply[:-1]]  # the end marker last


def test_sglang_media_and_reasons(tmp_path: Path) -> None:
    mirror = MirrorCache()
    replicas = ReplicaSet()
    taken: list[list[Event]] = []
    for seq, payload in enumerate(sglang_payloads(tmp_path)):
        for event in decode_batch(payload, WireFormat.SGLANG).events:
            mirror.apply(event)
        events = mirror.take_events()
        taken.append(events)
        opening: tuple[Event, ...] = (AllBlocksCleared(),) if seq == 0 else ()
        meta = mirror.meta() if seq == 0 else None
        replicas.apply(EventBatch("sg", "e", seq, 0.0, (*opening, *events), meta=meta))
        assert replicas["sg"].state_digest() == mirror.state_digest()

    def tier(index: int, medium: str) -> BlockStored:
        tokens = tuple(TOKENS[index * PAGE : (index + 1) * PAGE])
        parent = OURS[index - 1] if index else None
        return BlockStored((OURS[index],), parent, tokens, PAGE, medium=medium)

    assert taken[1] == [tier(0, "CPU_PINNED"), tier(1, "CPU_PINNED"), tier(0, "DISK")]
    assert taken[2] == [  # the deepest run first: a replica never holds an orphan
        BlockRemoved((OURS[2],), "GPU", "evicted"),
        BlockRemoved((OURS[0], OURS[1]), "GPU", "demoted"),
    ]
    assert taken[3] == [
        BlockRemoved((OURS[1],), "CPU_PINNED", "evicted"),
        BlockRemoved((OURS[0],), "CPU_PINNED", "demoted"),
    ]
    assert mirror.tiers.media == ("DISK",) and len(mirror) == 0
    assert replicas.store.tier_holds("sg", "DISK", OURS[0])
    assert mirror.tiers.counters.unknown_medium_events == 0
