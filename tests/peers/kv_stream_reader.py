"""Read a KV-event stream with an engine's own msgspec decoder: sglang 0.5.16's (run in
bench/.venv-sglang, ``--engine sglang``) or vLLM 0.33.0's (bench/.venv-vllm, ``--engine vllm``).

Subscribes to ``--pub`` (topic ``""``), asks ``--replay`` for everything from ``--from``,
decodes every payload with ``msgspec.msgpack.Decoder(KVEventBatch)`` from
``sglang.srt.disaggregation.kv_events`` or ``vllm.distributed.kv_events``, then waits for
``--live`` live messages. Prints one
JSON object: batches replayed, their first and last seq, event counts by type, live seqs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import msgspec
import zmq


def batch_type(engine: str) -> type:
    """The engine's own ``KVEventBatch`` (imported only in that engine's venv)."""
    if engine == "sglang":
        from sglang.srt.disaggregation.kv_events import KVEventBatch as SglangBatch

        return SglangBatch
    from vllm.distributed.kv_events import KVEventBatch as VllmBatch

    return VllmBatch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pub", required=True)
    parser.add_argument("--replay", required=True)
    parser.add_argument("--from", dest="start", type=int, default=0)
    parser.add_argument("--live", type=int, default=0)
    parser.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    args = parser.parse_args()
    decoder = msgspec.msgpack.Decoder(batch_type(args.engine))
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(args.pub)
    dealer = context.socket(zmq.DEALER)
    dealer.connect(args.replay)
    dealer.send_multipart([b"", args.start.to_bytes(8, "big")])
    kinds: Counter[str] = Counter()
    seqs: list[int] = []
    while True:
        # sglang replies (seq, payload); vLLM (topic, seq, payload), as its ZmqEventPublisher does.
        *_, seq_bytes, payload = dealer.recv_multipart()
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        if seq == -1:
            break
        batch = decoder.decode(payload)
        kinds.update(type(event).__name__ for event in batch.events)
        seqs.append(seq)
    print(json.dumps({"ready": True}), flush=True)
    live: list[int] = []
    sub.setsockopt(zmq.RCVTIMEO, 30_000)
    while len(live) < args.live:
        _topic, seq_bytes, payload = sub.recv_multipart()
        decoder.decode(payload)
        live.append(int.from_bytes(seq_bytes, "big"))
    print(
        json.dumps(
            {
                "replayed": len(seqs),
                "first": seqs[0] if seqs else None,
                "last": seqs[-1] if seqs else None,
                "dense": seqs == list(range(args.start, args.start + len(seqs))),
                "kinds": dict(kinds),
                "live": live,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
