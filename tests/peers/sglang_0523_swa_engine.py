"""sglang 0.5.23's own ``UnifiedRadixCache`` (FULL and SWA components, its default tree core:
the bundled Rust one) with ``swa_es.integrations.sglang`` installed, publishing through sglang's
own ``SchedulerKvEventsPublisher`` and ``ZmqEventPublisher``: the engine side of
``tests/differential/test_sglang_0523_swa_bridge.py``. Runs in ``bench/.venv-sglang-0523``.

Each ``step`` runs one seeded operation of a serving loop on sglang's cache, under pressure on
both pools (the 0.5.16 engine's loop, ``tests/peers/sglang_swa_engine.py``, in 0.5.23's API): a
request (``match_prefix`` -> ``lock`` -> allocate, evicting when a pool is short -> ``insert`` ->
``unlock``), sometimes after a long decode freed the SWA KV of its own tokens below the window
(``InsertParams.set_evicted_seqlen(SWA, n)``); a running request that keeps its lock, releases
its SWA lock early (``release_swa``) and finishes later; a direct ``evict``; rarely a ``reset``.
Then the publisher's ``publish_kv_events`` hands the step's events to sglang's publisher, as
sglang's scheduler does once per loop.

After each step it answers with sampled prompts (the request just served, a partly cached one,
one whose window was freed, one fully evicted) and sglang's own answer for each: ``usable`` is
``match_prefix(prompt).device_prefix_len``; ``cached`` is the full-KV prefix the tree holds,
tombstones included (the core's read-only ``match_full_device_prefix``).

Protocol (tests/peers/command_loop.py): ``{"cmd": "start", ...case}`` -> ``{"published": n,
"core": tree core class}``; ``{"cmd": "step"}`` -> ``{"published": batches so far, "op": name,
"samples": [{"kind", "tokens", "cached", "usable"}, ...], "tombstones": n}``.
"""

from __future__ import annotations

# The integration goes in before sglang builds any cache (as launch_server does).
from swa_es.integrations.sglang import install

install()

import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from array import array  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from sglang.srt.managers.scheduler_components.kv_events_publisher import (  # noqa: E402
    SchedulerKvEventsPublisher,
)
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

from swa_es.engine.workload import ChatWorkload  # noqa: E402
from swa_es.integrations.sglang.publishing import split_runs  # noqa: E402
from swa_es.integrations.sglang.v0523 import residency  # noqa: E402
from tests.peers.command_loop import serve_commands, wait_sent  # noqa: E402

RECENT = 64
"""How many served prompts the samples are drawn from."""
SWA = ComponentType.SWA


def build_cache(
    page: int,
    window: int,
    full: int,
    swa: int,
    core: str | None,
    events: bool = True,
    lora_names: Any = None,
) -> tuple[Any, Any]:
    """sglang's cache and allocator on the CPU (smallest pool shapes; the KV is never read);
    ``core`` names sglang's tree core backend (None: its default); ``lora_names``: sglang's
    ``KvEventLoraNames`` (the LoRA namespaces its events name), None for none."""
    kvcache = SWAKVPool(
        size=full,
        size_swa=swa,
        page_size=page,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=1,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
    )
    allocator = SWATokenToKVPoolAllocator(
        size=full,
        size_swa=swa,
        page_size=page,
        dtype=torch.bfloat16,
        device="cpu",
        kvcache=kvcache,
        need_sort=False,
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,  # unused by the tree-only path
        token_to_kv_pool_allocator=allocator,
        page_size=page,
        enable_kv_cache_events=events,
        sliding_window_size=window,
        tree_components=(ComponentType.FULL, SWA),
        tree_core_backend=core,
    )
    if lora_names is not None:
        params.kv_event_lora_names = lora_names
    return UnifiedRadixCache(params), allocator


@dataclass
class Running:
    """A request that keeps its tree lock across steps."""

    lock: Any


class SwaEngine:
    """sglang's cache, its allocator and a seeded serving loop (see the module docstring)."""

    def __init__(self, case: dict[str, Any]) -> None:
        """``case``: ``page_size``, ``window``, ``full_size``, ``swa_size``, ``max_tokens``,
        ``seed`` and optionally ``core`` (sglang's tree core backend; None: its default)."""
        self.page = case["page_size"]
        self.window = case["window"]
        self.cache, self.allocator = build_cache(
            self.page, self.window, case["full_size"], case["swa_size"], case.get("core")
        )
        self.rng = random.Random(case["seed"])
        self.workload = ChatWorkload(
            seed=case["seed"],
            system_prompts=6,
            system_prompt_tokens=4 * self.window,
            user_turn_tokens=2 * self.page + 6,
            assistant_turn_tokens=self.window + 3,
            new_conversation_prob=0.3,
            max_conversation_tokens=case["max_tokens"],
            max_open_conversations=8,
            vocab_size=50,
        )
        self.recent: list[list[int]] = []
        self.running: list[Running] = []
        self.last: list[int] = []

    # --- sglang's tree API ------------------------------------------------------------------

    @staticmethod
    def _key(tokens: list[int]) -> Any:
        return RadixKey(array("q", tokens))

    def match(self, tokens: list[int]) -> tuple[torch.Tensor, Any]:
        result = self.cache.match_prefix(MatchPrefixParams(key=self._key(tokens)))
        node = result.last_device_node
        indices = self.cache.path_device_indices(node)[: result.device_prefix_len]
        return indices, node

    def _try_alloc(self, needed: int) -> torch.Tensor | None:
        allocator = self.allocator
        if self.page == 1:
            fresh: torch.Tensor | None = allocator.alloc(needed)
            return fresh
        if needed > allocator.full_available_size() or needed > allocator.swa_available_size():
            return None
        full: torch.Tensor = allocator.full_attn_allocator.alloc(needed)
        allocator.set_full_to_swa_mapping(full, allocator.swa_attn_allocator.alloc(needed))
        return full

    def _alloc(self, needed: int) -> torch.Tensor:
        while True:
            fresh = self._try_alloc(needed)
            if fresh is not None:
                return fresh
            allocator = self.allocator
            full_short = max(0, needed - allocator.full_available_size())
            swa_short = max(0, needed - allocator.swa_available_size())
            result = self.cache.evict(EvictParams(num_tokens=full_short, swa_num_tokens=swa_short))
            if result.num_tokens_evicted == 0 and result.swa_num_tokens_evicted == 0:
                if not self.running:
                    raise RuntimeError(f"sglang's cache cannot free {needed} slots")
                self._finish(self.running[0])

    def serve(self, prompt: list[int], output: list[int], long_decode: bool, keep: bool) -> None:
        page, cache = self.page, self.cache
        tokens = prompt + output
        indices, node = self.match(prompt)
        matched = len(indices)
        lock = cache.lock(node)
        aligned = len(tokens) // page * page
        needed = -(-(len(tokens) - matched) // page) * page
        fresh = self._alloc(needed)
        owned = aligned - matched
        value = torch.cat((indices, fresh[:owned]))
        evicted = 0
        if long_decode:
            # The scheduler's out-of-window free: SWA of the request's own tokens below the window.
            evicted = max(0, (aligned - self.window - page) // page * page)
            if evicted > matched:
                self.allocator.free_swa(value[matched:evicted])
            else:
                evicted = 0
        params = InsertParams(key=self._key(tokens[:aligned]), value=value, prev_prefix_len=matched)
        if evicted:
            params.set_evicted_seqlen(SWA, evicted)
        cache.insert(params)
        if owned < needed:
            self.allocator.free(fresh[owned:])
        if keep:  # a running request: lock what it now holds
            _, held = self.match(tokens[:aligned])
            self.running.append(Running(cache.lock(held)))
        cache.unlock(lock)
        self.last = prompt
        self.recent = [*self.recent[-(RECENT - 1) :], prompt]

    def _finish(self, running: Running) -> None:
        self.running.remove(running)
        self.cache.unlock(running.lock)

    def step(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.002:
            self.cache.reset()
            self.allocator.clear()
            self.running.clear()
            return "reset"
        if roll < 0.10 and self.running:
            running = rng.choice(self.running)
            if running.lock.swa_released or rng.random() < 0.3:
                self._finish(running)
                return "finish"
            self.cache.release_swa(running.lock)
            return "release_window"
        if roll < 0.15:
            amount = rng.randrange(1, 4 * self.window + 2)
            full = rng.random() < 0.3
            self.cache.evict(EvictParams(num_tokens=amount if full else 0, swa_num_tokens=amount))
            return "evict"
        request = self.workload.next_request()
        keep = roll < 0.25 and len(self.running) < 2
        long_decode = rng.random() < 0.25
        self.serve(request.prompt_ids, request.output_ids, long_decode, keep)
        return "serve_keep" if keep else ("serve_long" if long_decode else "serve")

    # --- reading the tree (read-only) ----------------------------------------------------------

    def held(self, tokens: list[int]) -> tuple[int, bool]:
        """(full-KV prefix the tree holds, whether an SWA tombstone lies inside it)."""
        key = self._key(tokens[: len(tokens) // self.page * self.page])
        core = self.cache.tree_core
        length = int(core.match_full_device_prefix(key)[0])
        return length, bool(length and core.swa_tombstone_ranges(key, 0, length))

    def samples(self) -> list[dict[str, Any]]:
        rng = self.rng
        picks: list[tuple[str, list[int]]] = []
        if self.last:
            picks.append(("served", self.last))
        if self.recent:
            base = rng.choice(self.recent)
            cut = rng.randrange(0, len(base) + 1)
            picks.append(("partial", base[:cut] + [rng.randrange(50, 60) for _ in range(9)]))
        reads = [(prompt, self.held(prompt)) for prompt in self.recent]
        freed = [prompt for prompt, (_, tombstoned) in reads if tombstoned]
        gone = [prompt for prompt, (full, _) in reads if full == 0]
        if freed:
            picks.append(("window_freed", rng.choice(freed)))
        picks.append(("evicted", rng.choice(gone) if gone else [60 + rng.randrange(9)] * 12))
        out = []
        for kind, tokens in picks:
            indices, _ = self.match(tokens)
            cached, _ = self.held(tokens)
            out.append({"kind": kind, "tokens": tokens, "cached": cached, "usable": len(indices)})
        return out

    def tombstoned_prompts(self) -> int:
        """How many recent prompts hold an SWA tombstone in their cached prefix."""
        return sum(self.held(prompt)[1] for prompt in self.recent)


class Session:
    """The engine of the current case and its publisher (one case at a time)."""

    def __init__(self) -> None:
        self.engine: SwaEngine | None = None
        self.publisher: Any = None
        self.published = 0

    def shutdown(self) -> None:
        if self.publisher is not None:
            self.publisher.kv_event_publisher.shutdown()
            self.publisher = None

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        """A fresh cache and publisher for one case (``SwaEngine``'s case, plus ``endpoint``
        and ``replay_endpoint``)."""
        self.shutdown()
        engine = SwaEngine(request)
        kv_events_config = json.dumps(
            {
                "publisher": "zmq",
                "endpoint": request["endpoint"],
                "replay_endpoint": request["replay_endpoint"],
                "buffer_steps": 100_000,
            }
        )
        # This process is the only scheduler: rank 0 of every parallel group (as in a
        # single-GPU server), which sglang reads to decide whether it publishes KV events.
        get_parallel().override_permanently(
            pp_rank=0, attn_tp_rank=0, attn_cp_rank=0, attn_dp_size=1, attn_dp_rank=0, dp_rank=None
        )
        self.publisher = SchedulerKvEventsPublisher(
            kv_events_config=kv_events_config,
            tree_cache=engine.cache,
            send_metrics_from_scheduler=None,
            max_running_requests=1,
            max_total_num_tokens=request["full_size"],
            get_stats=lambda: None,
        )
        self.engine, self.published = engine, 0
        self.publish()  # the start-up reset's AllBlocksCleared and the window declaration
        return {"published": self.published, "core": type(engine.cache.tree_core).__name__}

    def publish(self) -> None:
        assert self.engine is not None
        tracker = residency(self.engine.cache)
        assert tracker is not None, "the integration does not track this cache"
        tracker.drain()  # what take_events will return, counted in batches as it is sent
        self.published += len(split_runs(tracker.pending))
        self.publisher.publish_kv_events()
        wait_sent(self.publisher.kv_event_publisher._event_queue, poll_s=0.0005)

    def step(self, request: dict[str, Any]) -> dict[str, Any]:
        engine = self.engine
        if engine is None:
            return {"error": "no case started"}
        op = engine.step()
        self.publish()
        return {
            "published": self.published,
            "op": op,
            "samples": engine.samples(),
            "tombstones": engine.tombstoned_prompts(),
        }


def main() -> int:
    session = Session()
    return serve_commands({"start": session.start, "step": session.step}, session.shutdown)


if __name__ == "__main__":
    sys.exit(main())
