"""A real sglang 0.5.16 KV-event publisher, for the bridge tests (run in ``bench/.venv-sglang``).

Everything that matters is sglang's own code: ``SWARadixCache`` (with events on) serves the chat
workload the way ``bench/sglang_adapter.py`` drives it, and after every request sglang's
``SchedulerKvEventsPublisher.publish_kv_events`` takes the tree's events into a
``KVEventBatch`` and hands it to the ``ZmqEventPublisher`` that ``EventPublisherFactory``
builds from a ``--kv-events-config`` JSON, as the scheduler does.

Protocol: JSON lines on stdin, one JSON reply per line on stdout:
``{"cmd": "serve", "requests": N, "seed": S}`` -> ``{"published": seq count}``;
``{"cmd": "blocks"}`` -> ``{"blocks": [int64 block hash of every page in the tree]}``;
``{"cmd": "reset"}`` (``reset()``: ``AllBlocksCleared``); ``{"cmd": "exit"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from array import array
from types import SimpleNamespace
from typing import Any

from sglang.srt.managers.scheduler_components.kv_events_publisher import (
    SchedulerKvEventsPublisher,
)
from sglang.srt.mem_cache.utils import compute_node_hash_values, hash_str_to_int64

from bench.sglang_adapter import RunConfig, SglangWorker, build_cache
from swa_es.engine.workload import ChatWorkload
from tests.peers.command_loop import serve_commands, wait_sent


def tree_blocks(cache: Any, page_size: int) -> list[int]:
    """The int64 block hash of every page the tree holds (sglang's own hashing)."""
    blocks: list[int] = []
    stack = list(cache.root_node.children.values())
    while stack:
        node = stack.pop()
        if node.hash_value is None:
            node.hash_value = compute_node_hash_values(node, page_size)
        blocks.extend(hash_str_to_int64(h) for h in node.hash_value)
        stack.extend(node.children.values())
    return blocks


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--replay-endpoint", required=True)
    parser.add_argument("--buffer-steps", type=int, default=10_000)
    parser.add_argument("--page-size", type=int, default=4)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--full-size", type=int, default=16384)
    parser.add_argument("--swa-size", type=int, default=4096)
    args = parser.parse_args()
    config = RunConfig(
        page_size=args.page_size,
        events=True,
        requests=0,
        full_size=args.full_size,
        swa_size=args.swa_size,
        window=args.window,
    )
    cache, allocator = build_cache(config)
    worker = SglangWorker(cache, allocator, args.page_size)
    kv_events_config = json.dumps(
        {
            "publisher": "zmq",
            "endpoint": args.endpoint,
            "replay_endpoint": args.replay_endpoint,
            "buffer_steps": args.buffer_steps,
        }
    )
    parallel = SimpleNamespace(
        pp_rank=0, attn_tp_rank=0, attn_cp_rank=0, attn_dp_size=1, attn_dp_rank=0, dp_rank=None
    )
    publisher = SchedulerKvEventsPublisher(
        kv_events_config=kv_events_config,
        ps=parallel,
        attn_tp_rank=0,
        attn_cp_rank=0,
        attn_dp_rank=0,
        dp_rank=None,
        tree_cache=cache,
        send_metrics_from_scheduler=None,
        max_running_requests=1,
        max_total_num_tokens=args.full_size,
        get_stats=lambda: None,
    )
    zmq_publisher = publisher.kv_event_publisher
    publisher.publish_kv_events()  # the AllBlocksCleared of the cache's reset() at start-up
    published = 1

    def serve(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal published
        workload = ChatWorkload(seed=int(request.get("seed", 0)))
        for item in workload.take(int(request["requests"])):
            worker.serve(array("q", item.prompt_ids), array("q", item.output_ids))
            if cache.kv_event_queue:
                published += 1
            publisher.publish_kv_events()
        wait_sent(zmq_publisher._event_queue)
        return {"published": published}

    def reset(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal published
        cache.reset()
        publisher.publish_kv_events()
        published += 1
        return {"published": published}

    handlers = {
        "serve": serve,
        "reset": reset,
        "blocks": lambda request: {"blocks": tree_blocks(cache, args.page_size)},
    }
    return serve_commands(handlers, zmq_publisher.shutdown)


if __name__ == "__main__":
    sys.exit(main())
