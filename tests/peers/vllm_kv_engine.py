"""A real vLLM 0.33.0 KV-event publisher, for the bridge tests (run in ``bench/.venv-vllm``).

Everything that matters is vLLM's own code: its ``KVCacheManager`` (prefix caching and KV-cache
events on, one full-attention group) serves the chat workload the way vLLM's scheduler drives
it (``get_computed_blocks``, ``allocate_slots`` for the prompt and each decoded token, ``free``
when the request finishes), and after every request the manager's ``take_events()`` go out as a
``KVEventBatch`` through the ``ZmqEventPublisher`` that ``EventPublisherFactory`` builds from a
``KVEventsConfig``, as vLLM's scheduler does. Block hashes are vLLM's own (sha256 of its
chained block keys), bytes on the wire.

Protocol: JSON lines on stdin, one JSON reply per line on stdout:
``{"cmd": "serve", "requests": N, "seed": S}`` -> ``{"published": batch count}``;
``{"cmd": "prefixes"}`` -> ``{"prefixes": [sha256 hex of the token prefix each cached block
ends], "removed": BlockRemoved events published so far}``; ``{"cmd": "reset"}``
(``reset_prefix_cache``: ``AllBlocksCleared``); ``{"cmd": "exit"}``.
"""

from __future__ import annotations

import argparse
import hashlib
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
from vllm.v1.core.kv_cache_utils import (
    get_block_hash,
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

from swa_es.engine.workload import ChatWorkload
from tests.peers.command_loop import serve_commands, wait_sent


def prefix_key(tokens: list[int]) -> str:
    """The name both sides give a block: sha256 of the comma-joined token prefix it ends."""
    return hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest()


class VllmEngine:
    """vLLM's KV-cache manager serving requests one at a time, publishing after each."""

    def __init__(self, publisher: EventPublisher, block_size: int, num_blocks: int) -> None:
        self.block_size = block_size
        self.publisher = publisher
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(block_size, sha256)
        spec = FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16
        )
        config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(layer_names=["layer.0"], kv_cache_spec=spec)],
        )
        self.manager = KVCacheManager(
            config,
            max_model_len=1 << 16,
            scheduler_block_size=block_size,
            hash_block_size=block_size,
            enable_caching=True,
            enable_kv_cache_events=True,
        )
        self.prefixes: dict[Any, str] = {}  # vLLM block hash -> prefix key
        self.requests = 0
        self.published = 0
        self.removed = 0

    def publish(self) -> None:
        """What the scheduler does after each step: the manager's events, one batch."""
        events = self.manager.take_events()
        self.removed += sum(isinstance(event, BlockRemoved) for event in events)
        if events:
            self.publisher.publish(KVEventBatch(ts=time.time(), events=events))
            self.published += 1

    def _remember(self, request: Request) -> None:
        tokens = list(request.all_token_ids)
        for index, block_hash in enumerate(request.block_hashes):
            end = (index + 1) * self.block_size
            self.prefixes.setdefault(block_hash, prefix_key(tokens[:end]))

    def serve(self, prompt: list[int], output: list[int]) -> None:
        """One request: prefill with prefix-cache hits, decode ``output``, finish."""
        self.requests += 1
        request = Request(
            request_id=f"r{self.requests}",
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(max_tokens=max(1, len(output))),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        computed, hit_tokens, _ = self.manager.get_computed_blocks(request)
        allocated = self.manager.allocate_slots(
            request,
            len(prompt) - hit_tokens,
            num_new_computed_tokens=hit_tokens,
            new_computed_blocks=computed,
        )
        if allocated is None:
            raise RuntimeError("KV cache full: raise --num-blocks")
        request.num_computed_tokens = len(prompt)
        for token in output:
            request.append_output_token_ids(token)
            if self.manager.allocate_slots(request, 1) is None:
                raise RuntimeError("KV cache full: raise --num-blocks")
            request.num_computed_tokens += 1
        self._remember(request)
        self.manager.free(request)
        self.publish()

    def blocks(self) -> list[str]:
        """The prefix key of every block vLLM's prefix cache holds."""
        cached = self.manager.block_pool.cached_block_hash_to_block
        return [self.prefixes[get_block_hash(key)] for key in cached._cache]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--replay-endpoint", required=True)
    parser.add_argument("--buffer-steps", type=int, default=10_000)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--num-blocks", type=int, default=2048)
    args = parser.parse_args()
    config = KVEventsConfig(
        enable_kv_cache_events=True,
        publisher="zmq",
        endpoint=args.endpoint,
        replay_endpoint=args.replay_endpoint,
        buffer_steps=args.buffer_steps,
    )
    publisher = EventPublisherFactory.create(config, data_parallel_rank=0)
    engine = VllmEngine(publisher, args.block_size, args.num_blocks)

    def serve(request: dict[str, Any]) -> dict[str, Any]:
        workload = ChatWorkload(seed=int(request.get("seed", 0)))
        for item in workload.take(int(request["requests"])):
            engine.serve(list(item.prompt_ids), list(item.output_ids))
        wait_sent(publisher._event_queue)  # type: ignore[attr-defined]
        return {"published": engine.published}

    def reset(request: dict[str, Any]) -> dict[str, Any]:
        engine.manager.reset_prefix_cache()
        engine.publish()
        return {"published": engine.published}

    handlers = {
        "serve": serve,
        "reset": reset,
        "prefixes": lambda request: {"prefixes": engine.blocks(), "removed": engine.removed},
    }
    return serve_commands(handlers, publisher.shutdown)


if __name__ == "__main__":
    sys.exit(main())
