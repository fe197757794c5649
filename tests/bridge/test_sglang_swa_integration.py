"""``swa_es.integrations.sglang`` inside sglang 0.5.16 (bench/.venv-sglang): each way sglang's own
``SWARadixCache`` tombstones or revives a node queues the matching event with the node's page
hashes and the window (``tests/peers/sglang_swa_cases.py``), sglang's typed decoder still reads
every batch of its own events, and the version gate refuses what it does not know."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from typing import Any

import pytest

import swa_es.integrations.sglang as integration
from swa_es.integrations.sglang.wire import SWA_EVICTED, SWA_RESTORED
from tests.peers.sglang_venv import ROOT, require_sglang

SHARED = [7470307888890966271, -1634645291211865391, 7325169757385981536, -4123756397210254169]
"""sglang's own hashes of the pages 1, 2, 3, 4 from the root (page size 1)."""


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    python = require_sglang()
    run = subprocess.run(
        [str(python), "-W", "ignore", "-m", "tests.peers.sglang_swa_cases"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def stored_hashes(events: list[list[Any]]) -> list[int]:
    return [h for event in events if event[0] == "BlockStored" for h in event[1]]


@pytest.mark.sglang
def test_a_new_cache_declares_its_window(cases: dict[str, Any]) -> None:
    """After its reset's AllBlocksCleared, a cache declares the window: no blocks, window 16."""
    assert cases["installed"] == "0.5.16"
    assert cases["start"]["events"] == [["AllBlocksCleared"], [SWA_RESTORED, [], 16]]


@pytest.mark.sglang
def test_swa_eviction_of_an_internal_node_and_its_revival(cases: dict[str, Any]) -> None:
    """SWA eviction tombstones the shared node (pages 1-4, no event from sglang itself); an
    insert with the request's own slots revives it; each is one event naming those pages."""
    case = cases["internal_tombstone_then_restore"]
    assert stored_hashes(case["stored"])[:4] == SHARED
    assert case["tombstoned"] == [[SWA_EVICTED, SHARED, 4]]
    assert case["usable_after"] == 8  # a whole window (5-8) follows the tombstone
    assert case["restored"] == [[SWA_RESTORED, SHARED, 4]]


@pytest.mark.sglang
def test_early_release_of_a_leaf_tombstones_it(cases: dict[str, Any]) -> None:
    """``dec_swa_lock_only`` on a leaf frees its SWA: every page of it is tombstoned; a later
    full eviction removes it as usual."""
    case = cases["early_release_of_a_leaf"]
    pages = stored_hashes(case["stored"])
    assert len(pages) == 8
    assert case["released"] == [[SWA_EVICTED, pages, 4]]
    assert case["evicted"] == [["BlockRemoved", pages]]


@pytest.mark.sglang
def test_a_node_born_tombstoned_follows_its_store(cases: dict[str, Any]) -> None:
    """An insert below ``swa_evicted_seqlen`` stores a tombstoned node: its BlockSWAEvicted comes
    right after its pages' BlockStored, before the live leaf's."""
    events = cases["born_tombstoned"]["events"][2:]
    assert [e[0] for e in events] == ["BlockStored"] * 4 + [SWA_EVICTED] + ["BlockStored"] * 4
    assert events[4] == [SWA_EVICTED, SHARED, 4]
    assert cases["born_tombstoned"]["usable"] == 8


@pytest.mark.sglang
def test_revival_under_a_running_request_keeps_its_full_kv(cases: dict[str, Any]) -> None:
    """A tombstone whose full KV a running request locks is revived with the incoming SWA
    (``_recover_tombstone_keeping_locked_full``): the same event."""
    assert cases["locked_full_restore"]["restored"] == [[SWA_RESTORED, SHARED, 4]]


@pytest.mark.sglang
def test_events_off_stays_silent(cases: dict[str, Any]) -> None:
    """A cache built with events off queues nothing, the extension included."""
    assert cases["events_off"] == {"events": [], "queue": 0}


@pytest.mark.sglang
def test_sglang_typed_decoder_reads_every_batch_of_its_own_events(cases: dict[str, Any]) -> None:
    """Split by the publisher, a mixed step is batches of sglang's own events (which its own
    ``Decoder(KVEventBatch)`` reads back whole) and batches of the extension alone (which it
    rejects, losing nothing it knows)."""
    runs = cases["typed_decoder"]["runs"]
    assert len(runs) > 2
    for run in runs:
        extension = {event[0] for event in run["sent"]} <= {SWA_EVICTED, SWA_RESTORED}
        if extension:
            assert "rejected" in run
        else:
            assert run["decoded"] == run["sent"]


def test_unknown_sglang_versions_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release the integration does not know: a clear error, nothing changed."""
    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(__version__="0.4.9"))
    monkeypatch.setattr(integration, "_installed", None)
    with pytest.raises(integration.UnsupportedSglangError, match=r"sglang 0\.4\.9 is not supp"):
        integration.install()
    assert integration.installed() is None


def test_without_sglang_install_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where sglang cannot be imported: a clear error."""
    monkeypatch.setitem(sys.modules, "sglang", None)
    monkeypatch.setattr(integration, "_installed", None)
    with pytest.raises(integration.UnsupportedSglangError, match="not importable"):
        integration.install()
