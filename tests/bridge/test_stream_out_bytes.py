"""The stream out sends exactly the engines' bytes: for the same events, ``--zmq-format sglang``
and ``--zmq-format vllm`` reply to replays with the messages that sglang 0.5.16's and vLLM
0.33.0's own ``ZmqEventPublisher`` send (run in their venvs by
``tests/peers/engine_publisher_frames.py``), byte for byte: seq from 0 for the run, the payload
the engine's msgspec classes encode, the end marker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest
import zmq
import zmq.asyncio

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    EventBatch,
    decode_batch,
    encode_batch,
    event_to_dict,
)
from log import open_log
from swa_es.egress.config import EgressConfig
from swa_es.egress.stream import ZmqEgress
from tests.peers.sglang_venv import ROOT, require_sglang, require_vllm

TOPIC = "worker-0"
REPLAY_FROM = [0, 2, 5, 99]


def sample_batches() -> list[EventBatch]:
    """Stores of one and of several pages, a chain continued, removals with and without a
    medium, a clear and a lora id: the shapes both engines send."""
    events: list[tuple[Event, ...]] = [
        (AllBlocksCleared(), BlockStored((11, 12, -13), None, tuple(range(12)), 4)),
        (BlockStored((14,), -13, (7, 7, 7, 7), 4, lora_id=3),),
        (BlockRemoved((14,)), BlockStored((2**63 - 1,), 12, (1, 2, 3, 4), 4)),
        (BlockRemoved((11, 12), None), BlockStored((21,), None, (9, 8, 7, 6), 4, medium=None)),
        (AllBlocksCleared(),),
        (BlockStored((31, 32), None, (100_000, 5, 6, 7, 8, 9, 10, 11), 4),),
    ]
    return [
        EventBatch(TOPIC, "e", seq, 1_765_000_000.25 + seq, tuple(batch))
        for seq, batch in enumerate(events)
    ]


def engine_replies(engine: str, tmp_path: Path, batches: list[EventBatch]) -> list[list[str]]:
    """The engine publisher's replies to replay requests from each of ``REPLAY_FROM``."""
    python = require_sglang() if engine == "sglang" else require_vllm()
    request = {
        "topic": TOPIC,
        "batches": [{"ts": b.ts, "events": [event_to_dict(e) for e in b.events]} for b in batches],
        "replay_from": REPLAY_FROM,
    }
    done = subprocess.run(
        [
            *(str(python), "-W", "ignore", "-m", "tests.peers.engine_publisher_frames"),
            *("--engine", engine, "--endpoint", f"ipc://{tmp_path}/engine.pub"),
            *("--replay-endpoint", f"ipc://{tmp_path}/engine.replay"),
        ],
        cwd=ROOT,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    replies: list[list[list[str]]] = json.loads(done.stdout.splitlines()[-1])["replies"]
    return [[" ".join(message) for message in reply] for reply in replies]


async def our_replies(dealer: zmq.asyncio.Socket, starts: list[int]) -> list[list[str]]:
    """Our replay socket's replies to requests from each of ``starts``."""
    out: list[list[str]] = []
    for start in starts:
        await dealer.send_multipart([b"", start.to_bytes(8, "big")])
        reply: list[str] = []
        while True:
            frames = (await dealer.recv_multipart())[1:]
            reply.append(" ".join(frame.hex() for frame in frames))
            if frames[-2] == (-1).to_bytes(8, "big", signed=True):
                break
        out.append(reply)
    return out


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param("sglang", marks=pytest.mark.sglang),
        pytest.param("vllm", marks=pytest.mark.vllm),
    ],
)
async def test_replies_are_the_engines_bytes(tmp_path: Path, engine: str) -> None:
    """The log holds older records (another run's); this run's seqs start at 0 all the same,
    and every reply, live message and end marker is the engine publisher's, byte for byte."""
    batches = sample_batches()
    # the same events: as the log holds them (one page per store) and the stream reads them
    logged = [decode_batch(encode_batch(batch)) for batch in batches]
    expected = engine_replies(engine, tmp_path, logged)
    pub, replay = f"ipc://{tmp_path}/out.pub", f"ipc://{tmp_path}/out.replay"
    context = zmq.asyncio.Context()
    async with await open_log(f"file://{tmp_path}/log") as log:
        older = EventBatch("other", "e0", 0, 1.0, (BlockStored((5,), None, (1, 1, 1, 1), 4),))
        await log.append_batch([("other", encode_batch(older))] * 3)
        config = EgressConfig(publish_endpoint=pub, replay_endpoint=replay, wire_format=engine)
        async with ZmqEgress(log, config) as egress:
            sub = context.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(pub)
            await anyio.sleep(0.3)  # the PUB socket learns of the subscription
            await log.append_batch([(TOPIC, encode_batch(b)) for b in batches])
            live: list[str] = []
            with anyio.fail_after(30):
                while len(live) < len(batches):
                    live.append(" ".join(f.hex() for f in await sub.recv_multipart()))
            dealer = context.socket(zmq.DEALER)
            dealer.connect(replay)
            with anyio.fail_after(30):
                ours = await our_replies(dealer, REPLAY_FROM)
            for socket in (sub, dealer):
                socket.close(linger=0)
        assert egress.metrics.published == len(batches)
    context.term()
    for start, mine, theirs in zip(REPLAY_FROM, ours, expected, strict=True):
        assert len(mine) == len(theirs), f"replay from {start}: {len(mine)} != {len(theirs)}"
        for message, engine_message in zip(mine, theirs, strict=True):
            assert message == engine_message, f"replay from {start}"
    # live messages are (topic, seq, payload), the replayed payloads
    assert [message.split(" ")[-2:] for message in live] == [
        message.split(" ")[-2:] for message in expected[0][:-1]
    ]
    assert all(message.split(" ")[0] == TOPIC.encode().hex() for message in live)
