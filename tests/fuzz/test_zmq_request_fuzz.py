"""Fuzzing the stream out's request sockets over real ZMQ: the replay ROUTER of ``ZmqEgress``
(``--zmq-replay``) and the snapshot ROUTER of ``SnapshotServer`` (``--zmq-snapshot``), each
running on a real FileLog of a few records, sent arbitrary multipart messages from a DEALER.

Each message is answered as its protocol says or ignored (a malformed replay request is counted
and dropped), never a crash: after every hostile message, a valid request on the same socket is
still served, within a bound (each receive has a timeout, so a hang fails the test). The replay
oracle is exact: a message whose last frame is an 8-byte seq gets a replay ended by the end
marker, any other none, so the valid replay that follows must be the last thing received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio.from_thread
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.events import AllBlocksCleared, BlockStored, EventBatch, encode_batch
from log import open_log
from swa_es.bridge.wire import END_SEQ, END_SEQ_FRAME, SEQ_BYTES, encode_seq, parse_replay
from swa_es.egress.config import EgressConfig
from swa_es.egress.snapshot import REQUEST, SnapshotServer
from swa_es.egress.stream import StreamStart, ZmqEgress
from tests.bridge.waiting import free_port

RECORDS = 5
RECV_TIMEOUT_MS = 10_000
"""How long one answer may take (a hang fails the test instead of hanging it)."""
RATE_PER_S = 1e9
"""The fuzz client's request rate bound (high: this test is about malformed requests)."""


def batch(seq: int) -> EventBatch:
    """One small batch of source ``a``."""
    if seq == 0:
        return EventBatch("a", "e", 0, 1.0, (AllBlocksCleared(),))
    return EventBatch("a", "e", seq, 1.0, (BlockStored((seq,), None, (seq, seq), 2),))


STATE = [
    EventBatch(
        "a",
        "e",
        RECORDS - 1,
        1.0,
        (AllBlocksCleared(), *(BlockStored((s,), None, (s, s), 2) for s in range(1, RECORDS))),
    )
]


@dataclass(frozen=True)
class Served:
    """A running stream out: its replay and snapshot endpoints, and the servers."""

    replay: str
    snapshot: str
    egress: ZmqEgress
    server: SnapshotServer


@asynccontextmanager
async def running(tmp_path: Path, wire_format: str) -> AsyncIterator[Served]:
    """A stream out with replay and snapshot sockets over a FileLog of ``RECORDS`` batches."""
    replay, snapshot = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    config = EgressConfig(
        publish_endpoint=f"tcp://127.0.0.1:{free_port()}",
        replay_endpoint=replay,
        wire_format=wire_format,
        client_requests_per_s=RATE_PER_S,
    )
    async with await open_log((tmp_path / "log").as_uri()) as log:
        await log.append_batch([("a", encode_batch(batch(i))) for i in range(RECORDS)])
        async with ZmqEgress(log, config, deferred=True) as egress:
            egress.begin(StreamStart(0))
            async with SnapshotServer(egress, snapshot, lambda: (RECORDS, STATE)) as server:
                yield Served(replay, snapshot, egress, server)


@pytest.fixture(scope="module", params=["sglang", "vllm"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A stream out running in a thread of its own (its event loop's)."""
    tmp_path = tmp_path_factory.mktemp(f"zmq-fuzz-{request.param}")
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(running(tmp_path, request.param)) as running_now,
    ):
        yield running_now


@pytest.fixture(scope="module")
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.term()


def dealer(context: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
    socket.connect(endpoint)
    return socket


def receive(socket: zmq.Socket[bytes], what: str) -> list[bytes]:
    try:
        return socket.recv_multipart()
    except zmq.Again:
        raise AssertionError(f"no answer within {RECV_TIMEOUT_MS} ms to {what}") from None


FRAME = st.one_of(
    st.binary(max_size=24),
    st.sampled_from(
        [
            b"",
            END_SEQ_FRAME,
            encode_seq(0),
            encode_seq(RECORDS - 1),
            encode_seq(RECORDS),
            encode_seq(2**63 - 1),
            b"\xff" * 7 + b"\xfe",
            b"\x80" + b"\x00" * 7,
            REQUEST,
            b"snapshot-v1",
            b"snapshot-v2",
            b"snapshot-v0",
            b"snapshot-v",
            b"SNAPSHOT",
            b"snapshot\x00",
        ]
    ),
    st.integers(0, 2**64 - 1).map(lambda n: n.to_bytes(SEQ_BYTES, "big")),
    st.sampled_from([9, 4096, 300_000]).map(lambda n: b"s" * n),
)
MESSAGES = st.lists(FRAME, min_size=1, max_size=5)
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _replayed(socket: zmq.Socket[bytes], what: str) -> list[int]:
    """The seqs of one replay answer, up to its end marker."""
    seqs: list[int] = []
    while True:
        frame = parse_replay(receive(socket, what))
        if frame.seq == END_SEQ:
            return seqs
        seqs.append(frame.seq)


@SETTINGS
@given(messages=st.lists(MESSAGES, min_size=1, max_size=3))
def test_replay_requests(
    served: Served,
    context: zmq.Context[zmq.Socket[bytes]],
    messages: list[list[bytes]],
) -> None:
    """Arbitrary messages to the replay socket: each with an 8-byte last frame gets a replay
    (or the end marker alone), any other nothing; a valid request after them gets the whole
    log. Every answer is well-formed, nothing hangs."""
    socket = dealer(context, served.replay)
    bad_before = served.egress.metrics.bad_requests
    try:
        for message in messages:
            socket.send_multipart(message)
        socket.send_multipart([b"", encode_seq(0)])
        answered = [m for m in messages if len(m[-1]) == SEQ_BYTES and m[-1] != END_SEQ_FRAME]
        for message in answered:
            seqs = _replayed(socket, f"replay request {message!r:.80}")
            start = int.from_bytes(message[-1], "big")
            assert seqs == list(range(start, RECORDS)) or seqs == [], (start, seqs)
        assert _replayed(socket, "a valid replay request") == list(range(RECORDS))
        assert socket.poll(0) == 0, "an answer to a request that deserves none"
        # the others are counted as bad requests (the end marker's seq, -1, among them)
        assert served.egress.metrics.bad_requests - bad_before == len(messages) - len(answered)
    finally:
        socket.close(linger=0)


def _snapshot_reply(parts: list[bytes]) -> list[bytes]:
    """A reply to a ``snapshot`` request, without its envelope's empty frame."""
    return parts[1:] if parts and parts[0] == b"" else parts


@SETTINGS
@given(messages=st.lists(MESSAGES, min_size=1, max_size=3))
def test_snapshot_requests(
    served: Served,
    context: zmq.Context[zmq.Socket[bytes]],
    messages: list[list[bytes]],
) -> None:
    """Arbitrary messages to the snapshot socket: each answered with the protocol's reply or
    refusal (cut -2, sglang's ``error``); a valid ``snapshot`` request after them still gets
    the state (cut ``RECORDS - 1``, a 16-byte epoch, chunks). Nothing hangs."""
    socket = dealer(context, served.snapshot)
    try:
        for message in messages:
            socket.send_multipart(message)
        socket.send_multipart([b"", REQUEST])
        while True:
            reply = _snapshot_reply(receive(socket, "a valid snapshot request"))
            assert reply, "an empty reply"
            if reply[0] in (b"header", b"chunk", b"end", b"error"):
                assert len(reply) == 2, reply[:3]  # sglang's (kind, payload)
                continue
            assert len(reply[0]) == 8 and len(reply[1]) == 16, reply[:3]
            cut = int.from_bytes(reply[0], "big", signed=True)
            assert cut in (-2, RECORDS - 1), cut
            if cut == RECORDS - 1 and len(reply) > 2:
                break  # a served snapshot: the valid request's (or a hostile copy's)
    finally:
        socket.close(linger=0)
