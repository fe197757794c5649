"""Publish events through an engine's own ``ZmqEventPublisher`` and print the frames it sends:
sglang 0.5.16's (run in bench/.venv-sglang, ``--engine sglang``) or vLLM 0.33.0's
(bench/.venv-vllm, ``--engine vllm``).

Reads one JSON object on stdin: ``{"topic": str, "batches": [{"ts": float, "events": [...]}],
"replay_from": [int, ...]}``, events as ``cache.events.event_to_dict`` writes them (stores,
removals and clears only: the engines have no other kind). Each event becomes the engine's own
msgspec event the way its cache records it (sglang: one ``BlockStored`` per page, as its radix
cache's ``_record_store_event``; vLLM: one ``BlockStored`` for a chain with ``group_idx`` 0, as
its block pool's ``cache_full_blocks``), each batch the engine's ``KVEventBatch``, handed to the
publisher's ``publish``. Then it asks the replay socket from each ``replay_from`` seq and prints
``{"replies": [[[frame_hex, ...], ...], ...]}``: every reply message (after the ROUTER's empty
delimiter), the end marker included.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import zmq


def sglang_batch(batch: dict[str, Any]) -> Any:
    """``batch`` as sglang's ``KVEventBatch``."""
    from sglang.srt.disaggregation import kv_events as k

    events: list[Any] = []
    for event in batch["events"]:
        kind = event["type"]
        if kind == "BlockStored":
            size = event["block_size"]
            parent = event["parent_block_hash"]
            for index, block_hash in enumerate(event["block_hashes"]):
                tokens = event["token_ids"][index * size : (index + 1) * size]
                events.append(
                    k.BlockStored(
                        block_hashes=[block_hash],
                        parent_block_hash=parent,
                        token_ids=tokens,
                        block_size=len(tokens),
                        lora_id=event["lora_id"],
                        medium=event["medium"],
                    )
                )
                parent = block_hash
        elif kind == "BlockRemoved":
            events.append(
                k.BlockRemoved(block_hashes=event["block_hashes"], medium=event["medium"])
            )
        else:
            events.append(k.AllBlocksCleared())
    return k.KVEventBatch(ts=batch["ts"], events=events)


def vllm_batch(batch: dict[str, Any]) -> Any:
    """``batch`` as vLLM's ``KVEventBatch``."""
    from vllm.distributed import kv_events as k

    events: list[Any] = []
    for event in batch["events"]:
        kind = event["type"]
        if kind == "BlockStored":
            events.append(
                k.BlockStored(
                    block_hashes=event["block_hashes"],
                    parent_block_hash=event["parent_block_hash"],
                    token_ids=event["token_ids"],
                    block_size=event["block_size"],
                    lora_id=event["lora_id"],
                    medium=event["medium"],
                    lora_name=None,
                    group_idx=0,
                )
            )
        elif kind == "BlockRemoved":
            events.append(
                k.BlockRemoved(
                    block_hashes=event["block_hashes"], medium=event["medium"], group_idx=0
                )
            )
        else:
            events.append(k.AllBlocksCleared())
    return k.KVEventBatch(ts=batch["ts"], events=events)


def publisher(engine: str, endpoint: str, replay: str, topic: str) -> Any:
    """The engine's own ZmqEventPublisher, rank 0."""
    if engine == "sglang":
        from sglang.srt.disaggregation.kv_events import ZmqEventPublisher as SglangPublisher

        return SglangPublisher(0, endpoint=endpoint, replay_endpoint=replay, topic=topic)
    from vllm.distributed.kv_events import ZmqEventPublisher as VllmPublisher

    return VllmPublisher(0, endpoint=endpoint, replay_endpoint=replay, topic=topic)


def replay(dealer: zmq.Socket[bytes], start: int) -> list[list[str]]:
    """Every reply to a replay request from ``start``, the end marker included."""
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    replies: list[list[str]] = []
    while True:
        frames = dealer.recv_multipart()[1:]  # the ROUTER's empty delimiter
        replies.append([frame.hex() for frame in frames])
        if frames[-2] == (-1).to_bytes(8, "big", signed=True):
            return replies


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("sglang", "vllm"), required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--replay-endpoint", required=True)
    args = parser.parse_args()
    request = json.loads(sys.stdin.read())
    make = sglang_batch if args.engine == "sglang" else vllm_batch
    pub = publisher(args.engine, args.endpoint, args.replay_endpoint, request["topic"])
    for batch in request["batches"]:
        pub.publish(make(batch))
    dealer: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 30_000)
    dealer.connect(args.replay_endpoint)
    # the publisher thread encodes asynchronously: ask until every batch is in its ring
    while len(replay(dealer, 0)) <= len(request["batches"]):
        pass
    replies = [replay(dealer, start) for start in request["replay_from"]]
    dealer.close(linger=0)
    pub.shutdown()
    print(json.dumps({"replies": replies}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
