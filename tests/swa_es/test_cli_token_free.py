"""``--no-token-ids`` from the command line: ``swa-es serve`` writes a log in which no token id
appears; ``swa-es follow`` declared token-free refuses the stream out at start; and a follower
whose stream out meets that log (not declared token-free) sends none of the source's token ids
on any socket: its replay socket and its snapshot socket carry no store at all."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
import zmq

from log import open_log
from swa_es.bridge.wire import END_SEQ, decode_seq, encode_seq
from swa_es.cli.exit_codes import EXIT_USAGE
from swa_es.cli.main import main
from tests.bridge.waiting import free_port
from tests.swa_es.cli_process import CliProcess
from tests.swa_es.test_publisher_token_free import assert_token_free, batch_payloads

RECV_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def token_free_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FileLog written by ``swa-es serve --no-token-ids``."""
    directory = tmp_path_factory.mktemp("token-free") / "log"
    argv = ["serve", "--log", str(directory), "--requests", "12", "--window", "64"]
    assert main([*argv, "--page-size", "4", "--no-token-ids"]) == 0
    return directory


async def test_serve_writes_no_token_id_into_the_log(token_free_log: Path) -> None:
    async with await open_log(token_free_log.as_uri(), readonly=True) as log:
        assert_token_free(await batch_payloads(log))


def last_error(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("declared", ["flag", "variable"])
def test_a_token_free_follower_refuses_the_stream_out(
    token_free_log: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    declared: str,
) -> None:
    argv = ["follow", "--log", str(token_free_log), "--zmq-publish", f"ipc://{tmp_path}/pub"]
    if declared == "flag":
        argv.append("--no-token-ids")
    else:
        monkeypatch.setenv("SWA_ES_NO_TOKEN_IDS", "1")
    assert main(argv) == EXIT_USAGE
    line = last_error(capsys)
    assert line.startswith("swa-es follow: error: --zmq-publish: "), line
    assert "token-free (--no-token-ids)" in line and "token ids" in line, line


def test_a_token_free_follower_without_the_stream_out_runs(token_free_log: Path) -> None:
    argv = ["follow", "--log", str(token_free_log), "--no-token-ids", "--duration-s", "0.2"]
    assert main(argv) == 0


def replayed(context: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> list[bytes]:
    """The payloads a replay from seq 0 answers on a vLLM-format stream out (in seq order)."""
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
    socket.connect(endpoint)
    socket.send_multipart([b"", encode_seq(0)])
    payloads: list[bytes] = []
    try:
        while True:
            _empty, _topic, seq, payload = socket.recv_multipart()
            if decode_seq(seq) == END_SEQ:
                return payloads
            assert decode_seq(seq) == len(payloads)
            payloads.append(payload)
    finally:
        socket.close(linger=0)


def snapshot(context: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> list[bytes]:
    """The chunks of vLLM's proposed snapshot request (after the cut and the epoch)."""
    socket = context.socket(zmq.REQ)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
    socket.connect(endpoint)
    try:
        socket.send(b"snapshot")
        reply = socket.recv_multipart()
    finally:
        socket.close(linger=0)
    assert int.from_bytes(reply[0], "big", signed=True) >= -1, reply[0]
    return reply[2:]


def engine_events(payload: bytes) -> list[dict[str, Any]]:
    """The events of one vLLM batch ``[ts, events, data_parallel_rank]``."""
    _ts, events, _rank = msgpack.unpackb(payload)
    assert isinstance(events, list)
    return events


async def _record_count(log_dir: Path) -> int:
    async with await open_log(log_dir.as_uri(), readonly=True) as log:
        return len([record async for record in log.read()])


def record_count(log_dir: Path) -> int:
    """How many records the FileLog at ``log_dir`` holds."""
    return anyio.run(_record_count, log_dir)


def test_a_stream_out_sends_no_token_id_of_a_token_free_source(
    token_free_log: Path, tmp_path: Path
) -> None:
    """A follower with the stream out (vLLM format), not declared token-free, over a token-free
    log, while a token-free primary appends to it: the source fails on the stream (one error
    line naming it), each of its records is sent as its clears alone (no seq hole), and neither
    the replay nor the snapshot socket carries a store."""
    log_dir = tmp_path / "log"
    shutil.copytree(token_free_log, log_dir)
    before = record_count(log_dir)
    replay_endpoint = f"tcp://127.0.0.1:{free_port()}"
    snapshot_endpoint = f"tcp://127.0.0.1:{free_port()}"
    follow = CliProcess(
        *("follow", "--log", str(log_dir), "--zmq-format", "vllm"),
        *("--zmq-publish", f"ipc://{tmp_path}/pub", "--zmq-replay", replay_endpoint),
        *("--zmq-snapshot", snapshot_endpoint),
    )
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        follow.wait_for_line(lambda line: "ready: following" in line)
        argv = ["serve", "--log", str(log_dir), "--requests", "6", "--window", "64"]
        assert main([*argv, "--page-size", "4", "--no-token-ids", "--seed", "1"]) == 0
        error = follow.wait_for_line(lambda line: "withholds token ids" in line)
        after = record_count(log_dir)
        payloads = replayed(context, replay_endpoint)
        chunks = snapshot(context, snapshot_endpoint)
        assert follow.stop(signal.SIGTERM) == 0
    finally:
        follow.kill()
        context.destroy(linger=0)
    assert "source 'worker-0'" in error and "token_ids: false" in error, error
    assert sum("withholds token ids" in line for line in follow.lines) == 1, follow.text()
    assert len(payloads) == after - before > 0  # the run starts at the follower's position
    sent = [event for payload in payloads for event in engine_events(payload)]
    assert {event["type"] for event in sent} == {"AllBlocksCleared"}, sent[:5]
    assert not [event for chunk in chunks for event in engine_events(chunk)]
