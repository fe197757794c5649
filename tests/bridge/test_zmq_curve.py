"""CURVE on the stream out's sockets and on the bridge, and the bounds on replay and snapshot
requests, with real sockets and key pairs generated here (``zmq.auth.create_certificates``):
a listed client is served, a client without CURVE or with an unlisted key gets nothing (no
connection completes: a bounded receive stays empty) and ZAP counts the refusal; a request from
too far back or faster than the client's rate gets the end marker alone, counted; snapshot
requests beyond the pending bound get the protocol's refusal at once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import zmq
import zmq.asyncio
import zmq.auth

from cache.events import AllBlocksCleared, BlockStored, EventBatch, encode_batch
from log import EventLog, open_log
from swa_es.bridge.curve import CurveClient, CurveKeyError, curve_client, load_key_pair
from swa_es.bridge.ingest import Bridge
from swa_es.bridge.wire import END_SEQ, decode_seq, encode_seq
from swa_es.egress.config import EgressConfig, ZmqServerSecurity
from swa_es.egress.curve import CurveServer
from swa_es.egress.limits import ClientRate
from swa_es.egress.snapshot import CUT_UNAVAILABLE, SnapshotServer
from swa_es.egress.stream import StreamStart, ZmqEgress
from tests.bridge.waiting import free_port, wait_until

NOTHING_S = 1.0
"""How long a refused client is given to receive something (it must receive nothing)."""


def keys(tmp_path: Path) -> dict[str, Path]:
    """Key pairs ``server``, ``client`` (listed in ``clients/``) and ``stranger`` (not listed);
    each name maps to its ``.key_secret`` file."""
    (tmp_path / "clients").mkdir()
    (tmp_path / "keys").mkdir()
    made: dict[str, Path] = {}
    for name in ("server", "client", "stranger"):
        public, secret = zmq.auth.create_certificates(tmp_path / "keys", name)
        made[name] = Path(secret)
        if name == "client":
            (tmp_path / "clients" / "client.key").write_text(Path(public).read_text())
    return made


def batch(seq: int) -> EventBatch:
    """One small batch of source ``a``."""
    events = (AllBlocksCleared(),) if seq == 0 else (BlockStored((seq,), None, (seq, seq), 2),)
    return EventBatch("a", "e", seq, 1.0, events)


async def filled_log(tmp_path: Path, count: int) -> EventLog:
    log = await open_log(f"file://{tmp_path}/log")
    await log.append_batch([("a", encode_batch(batch(i))) for i in range(count)])
    return log


@asynccontextmanager
async def stream_out(
    log: EventLog, config: EgressConfig, curve: CurveServer | None
) -> AsyncIterator[ZmqEgress]:
    """A stream out over ``log`` whose seq is the log offset (a run from offset 0)."""
    async with ZmqEgress(log, config, deferred=True, curve=curve) as egress:
        egress.begin(StreamStart(0))
        yield egress


def dealer(
    context: zmq.asyncio.Context, endpoint: str, curve: CurveClient | None
) -> zmq.asyncio.Socket:
    socket: zmq.asyncio.Socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.apply(socket)
    socket.connect(endpoint)
    return socket


async def replay(socket: zmq.asyncio.Socket, start: int, timeout_s: float) -> list[int] | None:
    """The seqs a replay from ``start`` answers (None: nothing came within ``timeout_s``)."""
    await socket.send_multipart([b"", encode_seq(start)])
    seqs: list[int] = []
    with anyio.move_on_after(timeout_s):
        while True:
            parts = await socket.recv_multipart()
            seq = decode_seq(parts[1])
            if seq == END_SEQ:
                return seqs
            seqs.append(seq)
    return None


def client_of(made: dict[str, Path], name: str, server: CurveServer) -> CurveClient:
    return CurveClient(server.keys.public, load_key_pair(made[name]))


async def test_listed_client_is_served_others_get_nothing(tmp_path: Path) -> None:
    made = keys(tmp_path)
    curve = CurveServer.of(
        ZmqServerSecurity(secret_key_file=made["server"], clients=tmp_path / "clients")
    )
    assert curve is not None
    pub, rep = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    config = EgressConfig(publish_endpoint=pub, replay_endpoint=rep)
    context = zmq.asyncio.Context()
    try:
        async with await filled_log(tmp_path, 5) as log, stream_out(log, config, curve):
            listed = dealer(context, rep, client_of(made, "client", curve))
            assert await replay(listed, 0, 30.0) == [0, 1, 2, 3, 4]
            # an unlisted key: ZAP refuses it (counted), and nothing comes back
            stranger = dealer(context, rep, client_of(made, "stranger", curve))
            assert await replay(stranger, 0, NOTHING_S) is None
            assert curve.allowed.refused >= 1
            # no CURVE at all: the handshake fails, nothing comes back
            plain = dealer(context, rep, None)
            assert await replay(plain, 0, NOTHING_S) is None
            # the live stream: the listed subscriber reads it, the plain one reads nothing
            subs: list[zmq.asyncio.Socket] = []
            for who in (client_of(made, "client", curve), None):
                sub: zmq.asyncio.Socket = context.socket(zmq.SUB)
                sub.setsockopt(zmq.LINGER, 0)
                if who is not None:
                    who.apply(sub)
                sub.subscribe(b"")
                sub.connect(pub)
                subs.append(sub)
            got: list[bytes] = []

            async def receive() -> None:
                got.append((await subs[0].recv_multipart())[1])

            async with anyio.create_task_group() as group:
                group.start_soon(receive)
                offset = 5
                while not got:  # a SUB joins slowly: publish until it reads one
                    await log.append_batch([("a", encode_batch(batch(offset)))])
                    offset += 1
                    await anyio.sleep(0.05)
            assert decode_seq(got[0]) >= 5
            with anyio.move_on_after(NOTHING_S) as waited:
                await subs[1].recv_multipart()
            assert waited.cancelled_caught
            # the allow-list is re-read: the stranger, listed now, is served on a new connection
            public = Path(made["stranger"]).with_suffix(".key")
            (tmp_path / "clients" / "stranger.key").write_text(public.read_text())
            again = dealer(context, rep, client_of(made, "stranger", curve))
            assert await replay(again, 3, 30.0) == list(range(3, offset))
    finally:
        context.destroy(linger=0)


async def test_replays_bounded_by_distance_and_client_rate(tmp_path: Path) -> None:
    """A replay from further back than --zmq-replay-max-records, or one beyond the client's
    rate, gets the end marker alone (the protocol's "nothing to replay"), counted."""
    context = zmq.asyncio.Context()
    try:
        async with await filled_log(tmp_path, 7) as log:
            rep = f"ipc://{tmp_path}/replay"
            config = EgressConfig(
                publish_endpoint=f"ipc://{tmp_path}/pub", replay_endpoint=rep, replay_max_records=3
            )
            async with stream_out(log, config, None) as egress:
                client = dealer(context, rep, None)
                assert await replay(client, 0, 30.0) == []  # 7 back, more than 3: refused
                assert await replay(client, 4, 30.0) == [4, 5, 6]
                assert egress.refusal_counts() == {("replay", "too_far"): 1}
            rep = f"ipc://{tmp_path}/replay2"
            config = EgressConfig(
                publish_endpoint=f"ipc://{tmp_path}/pub2",
                replay_endpoint=rep,
                client_requests_per_s=0.001,  # one request, then none for 1000 s
            )
            async with stream_out(log, config, None) as egress:
                client = dealer(context, rep, None)
                assert await replay(client, 5, 30.0) == [5, 6]
                assert await replay(client, 6, 30.0) == []  # at once again: refused
                assert egress.metrics.replayed == 2
                assert egress.refusal_counts() == {("replay", "rate"): 1}
    finally:
        context.destroy(linger=0)


def test_client_rate_refills_and_bounds_its_clients() -> None:
    now = [0.0]
    rate = ClientRate(2.0, max_clients=2, clock=lambda: now[0])
    assert [rate.allow(b"a") for _ in range(3)] == [True, True, False]  # bursts of 2
    now[0] = 0.5  # one token back
    assert rate.allow(b"a") and not rate.allow(b"a")
    rate.allow(b"b")
    rate.allow(b"c")  # a is the least recently seen: dropped, so it starts afresh
    assert rate.allow(b"a")


async def test_snapshot_requests_beyond_the_pending_bound_are_refused(tmp_path: Path) -> None:
    """With one request allowed to wait, a burst of requests while the follower captures
    gets the refusal (cut -2) at once for those beyond it; every client gets one answer."""
    config = EgressConfig(
        publish_endpoint=f"ipc://{tmp_path}/pub", snapshot_max_pending=1, client_requests_per_s=1e6
    )

    def slow_capture() -> tuple[int, list[EventBatch]]:
        time.sleep(0.2)  # the capture holds the event loop, as a big state's would
        return 0, [batch(0)]

    endpoint = f"ipc://{tmp_path}/snap"
    context = zmq.asyncio.Context()
    try:
        async with (
            await filled_log(tmp_path, 1) as log,
            stream_out(log, config, None) as egress,
            SnapshotServer(egress, endpoint, slow_capture) as server,
        ):
            clients = [dealer(context, endpoint, None) for _ in range(6)]
            for client in clients:
                await client.send_multipart([b"", b"snapshot"])
            cuts = []
            with anyio.fail_after(60):
                for client in clients:
                    parts = await client.recv_multipart()
                    cuts.append(int.from_bytes(parts[1], "big", signed=True))
            refused = cuts.count(CUT_UNAVAILABLE)
            assert refused >= 1
            assert egress.refusal_counts() == {("snapshot", "busy"): refused}
            assert len(cuts) - refused == server.metrics.served >= 1
    finally:
        context.destroy(linger=0)


async def test_bridge_is_a_curve_client_of_a_curve_publisher(tmp_path: Path) -> None:
    """The bridge with --zmq-curve-server-key and --zmq-curve-client-key-file reads an
    engine-format stream from a CURVE PUB and replays from its CURVE ROUTER (here the stream
    out, a real pyzmq PUB and ROUTER in the engine's framing); with an unlisted key it reads
    nothing."""
    made = keys(tmp_path)
    curve = CurveServer.of(
        ZmqServerSecurity(secret_key_file=made["server"], clients=tmp_path / "clients")
    )
    assert curve is not None
    server_public = Path(made["server"]).with_suffix(".key")
    pub, rep = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    config = EgressConfig(publish_endpoint=pub, replay_endpoint=rep)
    async with (
        await filled_log(tmp_path / "engine", 4) as engine_log,
        stream_out(engine_log, config, curve),
        await open_log(f"file://{tmp_path}/ours") as ours,
        await open_log(f"file://{tmp_path}/theirs") as theirs,
    ):
        listed = curve_client(str(server_public), made["client"])
        stranger = curve_client(curve.keys.public.decode(), made["stranger"])
        bridges = [
            Bridge(ours, endpoint=pub, replay_endpoint=rep, source="w", curve=listed),
            Bridge(theirs, endpoint=pub, replay_endpoint=rep, source="x", curve=stranger),
        ]
        async with bridges[0] as bridge, bridges[1] as refused, anyio.create_task_group() as tg:
            tg.start_soon(bridge.run)
            tg.start_soon(refused.run)
            await wait_until(lambda: bridge.metrics.batches_applied >= 4, 30.0, bridge)
            await engine_log.append_batch([("a", encode_batch(batch(4)))])
            await wait_until(lambda: bridge.metrics.batches_applied >= 5, 30.0, bridge)
            await wait_until(lambda: curve.allowed.refused >= 2, 30.0)
            tg.cancel_scope.cancel()
        assert refused.metrics.received == refused.metrics.replayed == 0


def test_curve_options_go_together_and_keys_are_checked(tmp_path: Path) -> None:
    made = keys(tmp_path)
    assert curve_client(None, None) is None
    with pytest.raises(CurveKeyError, match="--zmq-curve-client-key-file"):
        curve_client("x" * 40, None)
    with pytest.raises(CurveKeyError, match="neither a z85 key"):
        curve_client("not-a-key", made["client"])
    with pytest.raises(CurveKeyError, match="public key only"):
        load_key_pair(tmp_path / "clients" / "client.key")
    bare = tmp_path / "bare"
    bare.write_text(load_key_pair(made["server"]).secret.decode() + "\n")
    assert load_key_pair(bare) == load_key_pair(made["server"])
    with pytest.raises(CurveKeyError, match=r"--zmq-curve-clients .*: is not a directory"):
        CurveServer.of(ZmqServerSecurity(secret_key_file=bare, clients=tmp_path / "missing"))
