"""``swa_es.integrations.sglang`` inside sglang 0.5.23 (bench/.venv-sglang-0523): each way its
``UnifiedRadixCache`` (FULL + SWA) tombstones or restores a node queues the matching event with
the node's page hashes and the window, under its default Rust tree core and identically under
its Python one (``tests/peers/sglang_0523_swa_cases.py``); sglang's typed decoder still reads
every batch of its own events."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from swa_es.integrations.sglang.wire import SWA_EVICTED, SWA_RESTORED
from tests.peers.sglang_0523_swa_peer import require_sglang_0523
from tests.peers.sglang_venv import ROOT

pytestmark = pytest.mark.sglang

SHARED = [7470307888890966271, -1634645291211865391, 7325169757385981536, -4123756397210254169]
"""sglang's own hashes of the pages 1, 2, 3, 4 from the root (page size 1)."""
TAIL_A = [-8996316855309560295, -5260815463021685453, -8365104043257458777, -755789232781062269]
"""Its hashes of the pages 5, 6, 7, 8 after 1-4."""
DECLARED = [["AllBlocksCleared"], [SWA_RESTORED, [], 4]]


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    python = require_sglang_0523()
    run = subprocess.run(
        [str(python), "-W", "ignore", "-m", "tests.peers.sglang_0523_swa_cases"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


@pytest.fixture(scope="module")
def cases(runs: dict[str, Any]) -> dict[str, Any]:
    """The scenarios under sglang's default core, the Rust one."""
    rust: dict[str, Any] = runs["rust"]
    return rust


def test_both_tree_cores_send_the_same_stream(runs: dict[str, Any]) -> None:
    """The Rust core (sglang's default) and the Python one: the same events in every scenario."""
    assert runs["installed"] == "0.5.23"
    assert runs["rust"]["start"]["core"] == "RustUnifiedTreeCore"
    assert runs["python"]["start"]["core"] == "UnifiedTreeCore"
    for name, result in runs["rust"].items():
        if name != "start":
            assert runs["python"][name] == result, name


def test_a_new_cache_declares_its_window(cases: dict[str, Any]) -> None:
    """After its reset's AllBlocksCleared, a cache declares the window: no blocks, window 16."""
    assert cases["start"]["events"] == [["AllBlocksCleared"], [SWA_RESTORED, [], 16]]


def test_swa_eviction_of_an_internal_node_and_its_restore(cases: dict[str, Any]) -> None:
    """SWA eviction tombstones the shared node (pages 1-4) after evicting A's leaf whole; an
    insert of A with its own slots restores it; each is one event naming those pages."""
    case = cases["internal_tombstone_then_restore"]
    assert case["stored"][:2] == DECLARED
    assert case["stored"][2] == ["BlockStored", SHARED + TAIL_A]
    assert case["tombstoned"] == [["BlockRemoved", TAIL_A], [SWA_EVICTED, SHARED, 4]]
    assert case["usable_after"] == 8  # a whole window (9-12) follows the tombstone
    assert case["restored"] == [["BlockStored", TAIL_A], [SWA_RESTORED, SHARED, 4]]
    assert case["usable_restored"] == 8


def test_an_early_released_window_is_tombstoned_under_its_full_lock(cases: dict[str, Any]) -> None:
    """``release_swa`` leaves a running request's window evictable; SWA eviction then frees it
    while the full KV stays locked: both nodes tombstoned, then removed by a full eviction."""
    case = cases["early_release_of_a_leaf"]
    assert case["stored"][2:] == [["BlockStored", SHARED + TAIL_A]]
    assert case["released"] == [[SWA_EVICTED, SHARED, 4], [SWA_EVICTED, TAIL_A, 4]]
    assert case["usable"] == 0
    assert case["evicted"] == [["BlockRemoved", TAIL_A + SHARED]]


def test_a_block_born_tombstoned_follows_its_store(cases: dict[str, Any]) -> None:
    """An insert below the request's SWA-evicted length stores pages 1-4 without SWA: their
    BlockSWAEvicted comes right after the store."""
    assert cases["born_tombstoned"]["events"] == [
        *DECLARED,
        ["BlockStored", SHARED + TAIL_A],
        [SWA_EVICTED, SHARED, 4],
    ]
    assert cases["born_tombstoned"]["usable"] == 8


def test_restore_under_a_running_request_keeps_its_full_kv(cases: dict[str, Any]) -> None:
    """A tombstone whose full KV a running request locks takes the incoming SWA
    (``RecoverSWAWithLockedFull``): the same event."""
    case = cases["locked_full_restore"]
    assert case["restored"] == [["BlockStored", TAIL_A], [SWA_RESTORED, SHARED, 4]]
    assert case["usable"] == 8


def test_a_reset_clears_and_declares_again(cases: dict[str, Any]) -> None:
    """``reset()``: AllBlocksCleared, then the window declared again."""
    assert cases["reset"]["events"] == DECLARED


def test_events_off_stays_silent(cases: dict[str, Any]) -> None:
    """A cache built with events off queues nothing, the extension included."""
    assert cases["events_off"] == {"events": []}


def test_sglang_typed_decoder_reads_every_batch_of_its_own_events(cases: dict[str, Any]) -> None:
    """Split by the publisher, a mixed step is batches of sglang's own events (which its own
    ``Decoder(KVEventBatch)`` reads back whole) and batches of the extension alone (which it
    rejects, losing nothing it knows)."""
    runs = cases["typed_decoder"]["runs"]
    assert len(runs) > 2
    for run in runs:
        if {event[0] for event in run["sent"]} <= {SWA_EVICTED, SWA_RESTORED}:
            assert "rejected" in run
        else:
            assert run["decoded"] == run["sent"]


def test_namespaced_hashes_get_no_residency_rather_than_a_guess(cases: dict[str, Any]) -> None:
    """Under a LoRA adapter its events name, sglang namespaces the event hashes; the tree's own
    are not the stream's, so the blocks it stored below the window get no BlockSWAEvicted (the
    integration logs an error once) instead of one naming the wrong blocks."""
    events = cases["lora_namespace"]["events"]
    assert [event[0] for event in events] == ["BlockStored"]
    assert not set(events[0][1]) & set(SHARED + TAIL_A)
