"""Drive sglang 0.5.16's ``SWARadixCache`` with the chat workload, for ``bench/cache_bench.py``.

Runs inside ``bench/.venv-sglang`` (made by ``bench/setup_sglang.sh``), never in the project's
own venv. Each request does what ``swa_es.engine.worker.CacheWorker`` does on our cache, through
sglang's public tree API: ``match_prefix`` → ``inc_lock_ref`` → allocate the rest (page-aligned;
``evict`` when a pool is short) → ``insert(prev_prefix_len=matched)`` → free the unaligned tail →
``dec_lock_ref`` → ``take_events``.

How the cache is built (as sglang's own unit tests do, CPU only):

* ``SWAKVPool`` — their real two-pool KV store, with the smallest shapes (one full and one SWA
  layer, one head of dimension 1, bfloat16), so the allocator has the ``kvcache`` it requires;
  the KV tensors are never read or written by the tree path measured here.
* ``SWATokenToKVPoolAllocator(size=full, size_swa=swa, page_size, need_sort=False)`` — what the
  model runner builds outside disaggregation.
* ``CacheInitParams(disable=False, req_to_token_pool=None, ...)`` — the tree-only path never
  touches the request-to-token pool (only ``cache_finished_req`` does, which we do not call).
* Allocation: at page 1 ``allocator.alloc(n)``. At page > 1 that method asserts page 1 and the
  scheduler's ``alloc_extend`` needs a Triton kernel (GPU), so we take ``n`` (a page multiple)
  from its two inner ``PagedTokenToKVPoolAllocator.alloc`` and write the mapping with
  ``set_full_to_swa_mapping`` — what ``alloc_extend`` does when the prefix is page-aligned.
* Token ids are ``array('q')``, as sglang's ``Req`` holds them; converted before timing.

Modes: ``--json`` measures the given configuration and prints one JSON object; ``--serve``
reads one JSON request per line on stdin and answers each with one JSON line (the benchmark
keeps one such process so it can interleave repetitions without re-importing sglang).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from array import array
from dataclasses import asdict, dataclass
from typing import Any

import torch
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import (
    DecLockRefParams,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache

from swa_es.engine.workload import ChatWorkload

SGLANG_VERSION = "0.5.16"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One measurement: pools, window, page size, events switch and the request stream."""

    page_size: int
    events: bool
    requests: int
    seed: int = 0
    full_size: int = 32768
    swa_size: int = 8192
    window: int = 256


@dataclass(frozen=True, slots=True)
class RunResult:
    """Throughput and the work done, so both sides can be checked to do the same thing."""

    requests_per_s: float
    elapsed_s: float
    cpu_s: float
    events: int
    matched_tokens: int
    prompt_tokens: int
    full_evicted_tokens: int
    swa_evicted_tokens: int


def build_cache(config: RunConfig) -> tuple[Any, Any]:
    """A fresh sglang ``SWARadixCache`` and its allocator on the CPU."""
    kvcache = SWAKVPool(
        size=config.full_size,
        size_swa=config.swa_size,
        page_size=config.page_size,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=1,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
    )
    allocator = SWATokenToKVPoolAllocator(
        size=config.full_size,
        size_swa=config.swa_size,
        page_size=config.page_size,
        dtype=torch.bfloat16,
        device="cpu",
        kvcache=kvcache,
        need_sort=False,
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,  # unused by the tree-only path
        token_to_kv_pool_allocator=allocator,
        page_size=config.page_size,
        enable_kv_cache_events=config.events,
        sliding_window_size=config.window,
    )
    return SWARadixCache(params), allocator


class SglangWorker:
    """Serves chat requests on an sglang ``SWARadixCache`` (see the module docstring)."""

    def __init__(self, cache: Any, allocator: Any, page_size: int) -> None:
        self.cache = cache
        self.allocator = allocator
        self.page_size = page_size
        self.full_evicted = 0
        self.swa_evicted = 0

    def serve(self, prompt: array[int], output: array[int]) -> int:
        """One request's life cycle; returns the matched prefix length."""
        cache, page = self.cache, self.page_size
        tokens = prompt + output
        match = cache.match_prefix(MatchPrefixParams(key=RadixKey(prompt)))
        indices, node = match.device_indices, match.last_device_node
        matched = len(indices)
        lock = cache.inc_lock_ref(node)
        needed = -(-(len(tokens) - matched) // page) * page
        fresh = self._alloc(needed)
        aligned = len(tokens) // page * page
        owned = aligned - matched
        value = torch.cat((indices, fresh[:owned]))
        cache.insert(
            InsertParams(key=RadixKey(tokens[:aligned]), value=value, prev_prefix_len=matched)
        )
        if owned < needed:
            self.allocator.free(fresh[owned:])
        cache.dec_lock_ref(node, DecLockRefParams(swa_uuid_for_lock=lock.swa_uuid_for_lock))
        return matched

    def _alloc(self, needed: int) -> torch.Tensor:
        allocator = self.allocator
        while True:
            fresh = self._try_alloc(needed)
            if fresh is not None:
                return fresh
            full_short = max(0, needed - allocator.full_available_size())
            swa_short = max(0, needed - allocator.swa_available_size())
            result = self.cache.evict(EvictParams(num_tokens=full_short, swa_num_tokens=swa_short))
            if result.num_tokens_evicted == 0 and result.swa_num_tokens_evicted == 0:
                raise RuntimeError(f"sglang cache cannot free {needed} slots")
            self.full_evicted += result.num_tokens_evicted
            self.swa_evicted += result.swa_num_tokens_evicted

    def _try_alloc(self, needed: int) -> torch.Tensor | None:
        allocator = self.allocator
        if self.page_size == 1:
            return allocator.alloc(needed)  # type: ignore[no-any-return]  # sglang is untyped
        if needed > allocator.full_available_size() or needed > allocator.swa_available_size():
            return None
        full = allocator.full_attn_allocator.alloc(needed)
        swa = allocator.swa_attn_allocator.alloc(needed)
        allocator.set_full_to_swa_mapping(full, swa)
        return full  # type: ignore[no-any-return]  # sglang is untyped


def _freeze_heap() -> None:
    """Collect, then move every live object out of the collector's sight for the timed loop.

    Both sides do this (sglang's scheduler offers the same ``freeze_gc``): otherwise full
    collections keep re-scanning whatever the interpreter imported, which for sglang is
    millions of objects, and that would be measured instead of the cache.
    """
    gc.collect()
    gc.freeze()


def measure(config: RunConfig) -> RunResult:
    """Time ``config.requests`` requests on a fresh sglang cache (events taken every request)."""
    requests = [
        (array("q", r.prompt_ids), array("q", r.output_ids))
        for r in ChatWorkload(seed=config.seed).take(config.requests)
    ]
    cache, allocator = build_cache(config)
    cache.take_events()
    worker = SglangWorker(cache, allocator, config.page_size)
    events = matched = 0
    _freeze_heap()
    start, start_cpu = time.perf_counter(), time.process_time()
    for prompt, output in requests:
        matched += worker.serve(prompt, output)
        events += len(cache.take_events())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    gc.unfreeze()
    _check_accounting(cache, allocator, config)
    return RunResult(
        requests_per_s=len(requests) / elapsed if elapsed > 0 else math.inf,
        elapsed_s=elapsed,
        cpu_s=cpu,
        events=events,
        matched_tokens=matched,
        prompt_tokens=sum(len(p) for p, _ in requests),
        full_evicted_tokens=worker.full_evicted,
        swa_evicted_tokens=worker.swa_evicted,
    )


def _check_accounting(cache: Any, allocator: Any, config: RunConfig) -> None:
    """After a run the driver holds no slot: free + tree-held equals each pool (untimed)."""
    full_held, swa_held = cache.total_size()
    full = allocator.full_available_size() + full_held
    swa = allocator.swa_available_size() + swa_held
    if (full, swa) != (config.full_size, config.swa_size):
        raise RuntimeError(f"sglang pool accounting broke: {full} full / {swa} SWA slots")
    cache.sanity_check()


def _config_of(fields: dict[str, Any]) -> RunConfig:
    return RunConfig(
        page_size=int(fields["page_size"]),
        events=bool(fields["events"]),
        requests=int(fields["requests"]),
        seed=int(fields.get("seed", 0)),
        full_size=int(fields.get("full_size", 32768)),
        swa_size=int(fields.get("swa_size", 8192)),
        window=int(fields.get("window", 256)),
    )


def serve_lines() -> None:
    """Answer JSON-line measurement requests on stdin until it closes."""
    print(json.dumps({"ready": True, "sglang": SGLANG_VERSION}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply: dict[str, Any] = asdict(measure(_config_of(json.loads(line))))
        except Exception as exc:  # report any failure to the parent as JSON
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--json`` for one measurement, ``--serve`` for the JSON-line protocol."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--json", action="store_true", help="measure once, print one JSON object")
    mode.add_argument("--serve", action="store_true", help="JSON lines on stdin/stdout")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--events", choices=("on", "off"), default="on")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.serve:
        serve_lines()
        return 0
    config = RunConfig(args.page_size, args.events == "on", args.requests, args.seed)
    print(json.dumps({"config": asdict(config), "result": asdict(measure(config))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
