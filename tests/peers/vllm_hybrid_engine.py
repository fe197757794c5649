"""vLLM 0.33.0's own hybrid KV-cache manager as a KV-event publisher (run in bench/.venv-vllm).

A ``KVCacheManager`` with two KV-cache groups, group 0 ``FullAttentionSpec`` and group 1
``SlidingWindowSpec`` (block 16 by default, a window of W tokens), both drawing from one block
pool of N blocks (so both are under pressure), picks vLLM's ``HybridKVCacheCoordinator``.
Retention 0 is the engine's default (``CacheConfig.prefix_cache_retention_interval``; the SWA
group is then sparse), null the ``KVCacheConfig`` default (dense). Requests of a seeded
chat workload go through it one at a time the way vLLM's scheduler drives it:
``get_computed_blocks`` (its ``shared_prefix_boundary`` kept on the request), ``allocate_slots``
for the prompt, then for one decoded token per step, ``free`` after the last one. After every
step the manager's ``take_events()`` go out as one ``KVEventBatch`` through the
``ZmqEventPublisher`` vLLM builds from a ``KVEventsConfig``.

Protocol (JSON lines, ``tests/peers/command_loop.py``): ``{"cmd": "step"}`` runs one step and
answers ``{"seq": the batch's seq or null when the step changed nothing, "probes": [[tokens,
full, hybrid, capped], ...]}``: for a few sampled prompts (the running request's tokens, the
last finished conversation, an older one, an older one cut at a block and continued with new
tokens), vLLM's own ``get_computed_blocks`` asked without the ``num_tokens - 1`` cap
(``max_cache_hit_length`` = the prompt's length): ``full`` is the full-attention group's hit
(the shared-prefix boundary when the hybrid hit is shorter, else the hit), ``hybrid`` the hit;
``capped`` is the hit as the scheduler asks it (default cap). ``{"cmd": "configure", "endpoint":
..., "replay_endpoint": ..., "window": W, "retention": 0 | null, "num_blocks": N, "seed": S,
"swa_groups": G}`` (G sliding-window groups of one spec, 1 by default) replaces the engine and its
publisher by a fresh run of that configuration (the process imports vLLM once for several);
``{"cmd": "removed"}`` -> ``{"removed": [BlockRemoved events of group 0, of group 1, ...]}``;
``{"cmd": "exit"}`` ends it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

import torch
from vllm.config.kv_events import KVEventsConfig
from vllm.distributed.kv_events import (
    BlockRemoved,
    EventPublisher,
    EventPublisherFactory,
    KVEventBatch,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request

from swa_es.engine.workload import ChatWorkload
from tests.peers.command_loop import serve_commands, wait_sent


class HybridEngine:
    """vLLM's hybrid KV-cache manager serving a chat workload, one scheduler step at a time."""

    def __init__(
        self,
        publisher: EventPublisher,
        *,
        block_size: int,
        window: int,
        num_blocks: int,
        retention: int | None,
        seed: int,
        swa_groups: int = 1,
    ) -> None:
        self.block_size = block_size
        self.publisher = publisher
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(block_size, sha256)
        shape: dict[str, Any] = {
            "block_size": block_size,
            "num_kv_heads": 1,
            "head_size": 8,
            "dtype": torch.float16,
        }
        swa = SlidingWindowSpec(**shape, sliding_window=window)
        groups = [KVCacheGroupSpec(["layer.0"], FullAttentionSpec(**shape))]
        groups += [KVCacheGroupSpec([f"layer.{g + 1}"], swa) for g in range(swa_groups)]
        config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            prefix_cache_retention_interval=retention,
        )
        self.manager = KVCacheManager(
            config,
            max_model_len=1 << 14,
            scheduler_block_size=block_size,
            hash_block_size=block_size,
            enable_caching=True,
            enable_kv_cache_events=True,
        )
        self.workload = ChatWorkload(
            seed=seed,
            system_prompts=6,
            system_prompt_tokens=70,
            user_turn_tokens=30,
            assistant_turn_tokens=10,
            max_conversation_tokens=400,
            max_open_conversations=8,
            vocab_size=1000,
        )
        self.rng = random.Random(seed)
        self.published = 0
        self.requests = 0
        self.running: Request | None = None
        self.output: list[int] = []
        self.finished: list[list[int]] = []
        self.removed = [0] * len(groups)  # BlockRemoved events per group

    def _request(self, tokens: list[int], max_tokens: int = 1) -> Request:
        self.requests += 1
        return Request(
            request_id=f"r{self.requests}",
            prompt_token_ids=tokens,
            sampling_params=SamplingParams(max_tokens=max_tokens),
            pooling_params=None,
            block_hasher=self.hasher,
        )

    def _start(self) -> None:
        item = self.workload.next_request()
        request = self._request(list(item.prompt_ids), max(1, len(item.output_ids)))
        computed, hit, request.shared_prefix_boundary = self.manager.get_computed_blocks(request)
        allocated = self.manager.allocate_slots(
            request,
            request.num_tokens - hit,
            num_new_computed_tokens=hit,
            new_computed_blocks=computed,
        )
        if allocated is None:
            raise RuntimeError("KV cache full: raise --num-blocks")
        request.num_computed_tokens = request.num_tokens
        self.running, self.output = request, list(item.output_ids)

    def _decode(self, request: Request) -> None:
        request.append_output_token_ids(self.output.pop(0))
        if self.manager.allocate_slots(request, 1) is None:
            raise RuntimeError("KV cache full: raise --num-blocks")
        request.num_computed_tokens += 1
        if not self.output:
            self.finished.append(list(request.all_token_ids))
            self.manager.free(request)
            self.running = None

    def step(self) -> int | None:
        """One scheduler step: a prefill or one decoded token; the batch's seq if any."""
        if self.running is None:
            self._start()
        else:
            self._decode(self.running)
        events = self.manager.take_events()
        for event in events:
            if isinstance(event, BlockRemoved):
                self.removed[event.group_idx or 0] += 1
        if not events:
            return None
        self.publisher.publish(KVEventBatch(ts=time.time(), events=events))
        self.published += 1
        return self.published - 1

    def probe(self, tokens: list[int]) -> list[Any]:
        """[tokens, full-group hit, hybrid hit, hybrid hit under the default cap]."""
        request = self._request(tokens)
        _, hit, boundary = self.manager.get_computed_blocks(request, len(tokens))
        _, capped, _ = self.manager.get_computed_blocks(request)
        return [tokens, boundary or hit, hit, capped]

    def probes(self) -> list[list[Any]]:
        prompts: list[list[int]] = []
        if self.running is not None:
            prompts.append(list(self.running.all_token_ids))
        if self.finished:
            prompts.append(self.finished[-1])
            older = self.rng.choice(self.finished)
            prompts.append(older)
            cut = self.rng.randrange(len(older) // self.block_size + 1) * self.block_size
            fresh = [self.rng.randrange(1000, 2000) for _ in range(self.block_size * 2)]
            prompts.append(older[:cut] + fresh)
        return [self.probe(prompt) for prompt in prompts if prompt]


def start(request: dict[str, Any]) -> tuple[EventPublisher, HybridEngine]:
    """A publisher on the request's endpoints and an engine of its configuration."""
    config = KVEventsConfig(
        enable_kv_cache_events=True,
        publisher="zmq",
        endpoint=request["endpoint"],
        replay_endpoint=request["replay_endpoint"],
        buffer_steps=100_000,
    )
    publisher = EventPublisherFactory.create(config, data_parallel_rank=0)
    retention = request.get("retention", 0)
    engine = HybridEngine(
        publisher,
        block_size=int(request.get("block_size", 16)),
        window=int(request.get("window", 128)),
        num_blocks=int(request.get("num_blocks", 96)),
        retention=None if retention is None else int(retention),
        seed=int(request.get("seed", 0)),
        swa_groups=int(request.get("swa_groups", 1)),
    )
    return publisher, engine


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--replay-endpoint", required=True)
    args = parser.parse_args()
    current = [start({"endpoint": args.endpoint, "replay_endpoint": args.replay_endpoint})]

    def configure(request: dict[str, Any]) -> dict[str, Any]:
        """A fresh engine run of another configuration, publishing on new endpoints."""
        current[0][0].shutdown()
        current[0] = start(request)
        return {"configured": True}

    def step(request: dict[str, Any]) -> dict[str, Any]:
        publisher, engine = current[0]
        seq = engine.step()
        wait_sent(publisher._event_queue)  # type: ignore[attr-defined]
        return {"seq": seq, "probes": engine.probes()}

    handlers = {
        "configure": configure,
        "step": step,
        "removed": lambda request: {"removed": current[0][1].removed},
    }
    return serve_commands(handlers, lambda: current[0][0].shutdown())


if __name__ == "__main__":
    sys.exit(main())
