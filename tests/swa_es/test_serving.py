"""Tests of the serving driver ``CacheWorker`` on the real ``SWARadixCache``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cache import SWAKVAllocator, SWARadixCache
from swa_es.engine.worker import CacheFullError, CacheWorker, ServeOutcome
from swa_es.engine.workload import ChatRequest, ChatWorkload

# A small workload so that the pools below are under pressure and eviction runs often.
_SMALL = {
    "system_prompts": 4,
    "system_prompt_tokens": 48,
    "user_turn_tokens": 8,
    "assistant_turn_tokens": 16,
    "max_conversation_tokens": 400,
    "max_open_conversations": 6,
    "vocab_size": 500,
}


def _worker(
    page_size: int, device: str, full: int = 1024, swa: int = 512, window: int = 32
) -> CacheWorker:
    allocator = SWAKVAllocator(full_size=full, swa_size=swa, page_size=page_size, device=device)
    cache = SWARadixCache(allocator, sliding_window_size=window, page_size=page_size)
    return CacheWorker(cache)


def _assert_exact_accounting(worker: CacheWorker) -> None:
    cache = worker.cache
    allocator = cache.allocator
    full_held, swa_held = cache.total_size()
    assert allocator.full_available_size() + full_held == allocator.full_size
    assert allocator.swa_available_size() + swa_held == allocator.swa_size
    assert cache.full_protected_size() == 0
    assert cache.swa_protected_size() == 0
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def _run(worker: CacheWorker, requests: list[ChatRequest]) -> list[ServeOutcome]:
    outcomes = []
    for request in requests:
        outcomes.append(worker.serve(request))
        worker.cache.take_events()
    return outcomes


@pytest.mark.parametrize("page_size", [1, 16])
def test_pool_accounting_stays_exact_over_many_requests(page_size: int, device: str) -> None:
    """After every request the worker holds no slot: free + tree-held equals each pool's size."""
    worker = _worker(page_size, device)
    for request in ChatWorkload(seed=11, **_SMALL).take(300):
        worker.serve(request)
        _assert_exact_accounting(worker)


@pytest.mark.parametrize("page_size", [1, 16])
def test_serving_is_deterministic(page_size: int, device: str) -> None:
    """The same request stream gives the same outcomes, events and digest on two fresh caches."""
    requests = ChatWorkload(seed=12, **_SMALL).take(150)
    first, second = _worker(page_size, device), _worker(page_size, device)
    assert _run(first, requests) == _run(second, requests)
    assert first.cache.state_digest() == second.cache.state_digest()


@pytest.mark.parametrize("page_size", [1, 16])
def test_pressure_makes_the_worker_evict(page_size: int, device: str) -> None:
    """Small pools force eviction of both kinds, and reused prefixes are still matched."""
    outcomes = _run(_worker(page_size, device), ChatWorkload(seed=13, **_SMALL).take(300))
    assert sum(o.full_evicted_tokens for o in outcomes) > 0
    assert sum(o.swa_evicted_tokens for o in outcomes) > 0
    assert any(o.matched_tokens > 0 for o in outcomes)
    for o in outcomes:
        assert o.matched_tokens <= o.cached_before_tokens <= o.inserted_tokens
        assert o.matched_tokens % page_size == 0
        assert o.allocated_tokens % page_size == 0


def test_a_repeated_request_reuses_its_whole_aligned_prefix(device: str) -> None:
    """Serving a request twice matches the page-aligned prompt and allocates only the rest."""
    worker = _worker(16, device, full=2048, swa=2048, window=16)
    request = ChatRequest(0, list(range(1, 41)), list(range(100, 110)))  # 40 + 10 tokens
    first = worker.serve(request)
    assert (first.matched_tokens, first.allocated_tokens, first.inserted_tokens) == (0, 64, 48)
    second = worker.serve(request)
    assert second.matched_tokens == 32  # the prompt's 40 tokens, cut to whole pages
    assert second.allocated_tokens == 32  # 18 more tokens, rounded up to pages
    assert second.cached_before_tokens == 48
    _assert_exact_accounting(worker)


def test_unaligned_tail_slots_are_given_back(device: str) -> None:
    """A request whose length is not page-aligned leaves only whole cached pages allocated."""
    worker = _worker(16, device, full=256, swa=256, window=16)
    outcome = worker.serve(ChatRequest(0, list(range(1, 20)), list(range(30, 35))))  # 24 tokens
    assert outcome.inserted_tokens == 16
    assert worker.cache.total_size() == (16, 16)
    assert worker.cache.allocator.full_available_size() == 256 - 16
    _assert_exact_accounting(worker)


def test_a_request_larger_than_the_pools_fails_clearly(device: str) -> None:
    """A request that cannot fit even in empty pools raises CacheFullError naming its size."""
    worker = _worker(1, device, full=64, swa=32, window=8)
    with pytest.raises(CacheFullError, match="needs 40 slots") as caught:
        worker.serve(ChatRequest(3, list(range(1, 31)), list(range(40, 50))))
    assert caught.value.conversation_id == 3
    assert caught.value.swa_available == 32
    _assert_exact_accounting(worker)


def test_the_match_stays_locked_while_evicting(device: str) -> None:
    """Eviction for a request's own allocation never takes the prefix the request matched."""
    worker = _worker(1, device, full=96, swa=96, window=8)
    shared = list(range(1, 41))
    worker.serve(ChatRequest(0, shared, [200] * 8))  # caches 48 tokens
    outcome = worker.serve(ChatRequest(1, [*shared, 300, 301], [400] * 50))  # needs 52, 48 free
    assert outcome.matched_tokens == 40
    assert outcome.full_evicted_tokens >= 8
    assert worker.cache.match_prefix(shared).indices.numel() == 40
    _assert_exact_accounting(worker)


def test_index_tensors_live_on_the_cache_device(device: str) -> None:
    """Matches produced after serving are int64 tensors on the worker's device."""
    worker = _worker(1, device)
    request = ChatWorkload(seed=14, **_SMALL).next_request()
    worker.serve(request)
    indices = worker.cache.match_prefix(request.prompt_ids).indices
    assert indices.dtype == torch.int64
    assert indices.device.type == torch.device(device).type


@pytest.mark.slow  # a subprocess that imports torch: about 30 s on a loaded 2-core machine
def test_the_cache_benchmark_runs_and_reports_ratios(tmp_path: Path) -> None:
    """bench/cache_bench.py (ours only) prints JSON with per-run samples, medians and ratios
    (of medians and of bests), the publish-overhead case's included."""
    script = Path(__file__).resolve().parents[2] / "bench" / "cache_bench.py"
    argv = ["--no-sglang", "--requests", "20", "--repeat", "2", "--page-sizes", "1,16", "--json"]
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    samples = report["samples"]
    assert len(samples) == 2 * 2 * 2  # repeats x page sizes x events on/off
    assert {s["impl"] for s in samples} == {"ours"}
    assert all((s["events_taken"] > 0) == s["events"] for s in samples)
    assert all(s["requests_per_s"] > 0 for s in samples)
    assert set(report["ratios"]) == {"ours_on_off_overhead_p1", "ours_on_off_overhead_p16"}
    assert all(r["best"] > 0 and r["value"] > 0 for r in report["ratios"].values())
    publish = report["publish"]
    assert len(publish["samples"]) == 2 * 2 * 2
    on = [s for s in publish["samples"] if s["events"]]
    assert all(s["records"] > 0 and s["stored_blocks"] > 0 for s in on)
    # the encoder thread's CPU time (0 where the kernel keeps no schedstat) is none events off
    assert all(s["encoder_cpu_s"] >= 0 for s in on)
    assert all(s["encoder_cpu_s"] == 0 for s in publish["samples"] if not s["events"])
    assert all(s["loop_minor_faults"] >= 0 for s in publish["samples"])
    assert set(publish["ratios"]) == {
        f"publish_on_off_p{page}_{clock}" for page in (1, 16) for clock in ("cpu", "process_cpu")
    }
    assert 0 < publish["wire"]["wire_bytes_per_block_p1_stored_only"] < 64
