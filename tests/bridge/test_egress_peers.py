"""The ZMQ stream out, read by the engines' own msgspec ``KVEventBatch`` decoders: sglang
0.5.16's (``--zmq-format sglang``) and vLLM 0.33.0's (``--zmq-format vllm``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    EventBatch,
    encode_batch,
)
from log import EventLog, open_log
from swa_es.egress.config import EgressConfig
from swa_es.egress.stream import ZmqEgress
from tests.peers.sglang_venv import ROOT, require_sglang, require_vllm

BATCHES = 100_000


def synthetic_batch(seq: int) -> EventBatch:
    """Batch ``seq`` of one source: stores a page, sometimes tombstones or removes one."""
    events: list = [AllBlocksCleared()] if seq == 0 else []
    events.append(BlockStored((seq + 1,), seq if seq else None, (seq, seq + 1), 2))
    if seq % 10 == 9:
        events.append(BlockSWAEvicted((seq,)))
    if seq % 100 == 99:
        events.append(BlockRemoved((seq + 1,)))
    meta = BatchMeta(page_size=2, sliding_window_size=4) if seq == 0 else None
    return EventBatch("w0", "e1", seq, float(seq), tuple(events), meta=meta)


async def fill(log: EventLog, start: int, stop: int) -> None:
    for low in range(start, stop, 2000):
        records = [
            ("w0", encode_batch(synthetic_batch(s))) for s in range(low, min(stop, low + 2000))
        ]
        await log.append_batch(records)


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param("sglang", marks=pytest.mark.sglang),
        pytest.param("vllm", marks=pytest.mark.vllm),
    ],
)
async def test_replay_from_seq_0_after_100k_batches(tmp_path: Path, engine: str) -> None:
    """Every batch of the run is replayed from seq 0 and decodes with the engine's own
    decoder; live batches follow on the PUB socket with the next seqs."""
    python = require_sglang() if engine == "sglang" else require_vllm()
    pub, replay = f"ipc://{tmp_path}/out.pub", f"ipc://{tmp_path}/out.replay"
    async with await open_log(f"file://{tmp_path}/log?fsync=never") as log:
        config = EgressConfig(publish_endpoint=pub, replay_endpoint=replay, wire_format=engine)
        async with ZmqEgress(log, config) as egress:
            await fill(log, 0, BATCHES)
            reader = subprocess.Popen(  # noqa: ASYNC220 -- read through a thread below
                [
                    str(python),
                    "-W",
                    "ignore",
                    "-m",
                    "tests.peers.kv_stream_reader",
                    "--engine",
                    engine,
                    "--pub",
                    pub,
                    "--replay",
                    replay,
                    "--live",
                    "5",
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert reader.stdout is not None
            ready = await anyio.to_thread.run_sync(reader.stdout.readline)
            assert json.loads(ready) == {"ready": True}
            await anyio.sleep(0.5)  # the SUB socket joined long ago; give PUB a beat
            await fill(log, BATCHES, BATCHES + 5)
            line = await anyio.to_thread.run_sync(reader.stdout.readline)
            result = json.loads(line)
            reader.wait(timeout=30)
        assert egress.metrics.replayed == BATCHES
    assert result["replayed"] == BATCHES
    assert result["first"] == 0 and result["last"] == BATCHES - 1 and result["dense"]
    assert result["kinds"] == {
        "AllBlocksCleared": 1,
        "BlockStored": BATCHES,
        "BlockRemoved": BATCHES // 100,
    }
    assert result["live"] == list(range(BATCHES, BATCHES + 5))


@pytest.mark.parametrize(
    ("engine", "tombstones"),
    [
        pytest.param("sglang", "keep", marks=pytest.mark.sglang),
        pytest.param("sglang", "remove", marks=pytest.mark.sglang),
        pytest.param("vllm", "remove", marks=pytest.mark.vllm),
    ],
)
async def test_tombstone_policy(tmp_path: Path, engine: str, tombstones: str) -> None:
    """``--zmq-tombstones keep`` sends nothing for a tombstone (the engine's reader keeps the
    block); ``remove`` sends a ``BlockRemoved`` the engine's own decoder reads."""
    python = require_sglang() if engine == "sglang" else require_vllm()
    pub, replay = f"ipc://{tmp_path}/out.pub", f"ipc://{tmp_path}/out.replay"
    batches = 200
    async with await open_log(f"file://{tmp_path}/log") as log:
        config = EgressConfig(
            publish_endpoint=pub, replay_endpoint=replay, wire_format=engine, tombstones=tombstones
        )
        async with ZmqEgress(log, config):
            await fill(log, 0, batches)
            command = [str(python), "-W", "ignore", "-m", "tests.peers.kv_stream_reader"]
            command += ["--engine", engine, "--pub", pub, "--replay", replay]
            done = await anyio.run_process(command, cwd=ROOT, stderr=subprocess.DEVNULL)
    lines = done.stdout.decode().splitlines()
    assert json.loads(lines[0]) == {"ready": True}
    kinds = json.loads(lines[1])["kinds"]
    evicted = batches // 10 if tombstones == "remove" else 0
    assert kinds == {
        "AllBlocksCleared": 1,
        "BlockStored": batches,
        "BlockRemoved": batches // 100 + evicted,
    }
