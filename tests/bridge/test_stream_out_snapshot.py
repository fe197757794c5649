"""A router bootstraps from ``swa-es follow --zmq-snapshot`` instead of replaying history:
vLLM's proposed snapshot request, and sglang's proposed worker snapshot (versions 1 and 2).

The client here is written from the protocol text of vLLM's proposed snapshot service
(vllm-project/vllm#57789, as /work/shared/ENGINE_PROTOCOLS.md §4 and docs/routing.md describe
it), not from its code, which is not released: subscribe to the live stream first, send the
single frame ``snapshot`` on a REQ socket, read ``[cut, epoch, chunk...]``, apply the chunks
(engine batches) to a fresh index, then apply live messages strictly in order from ``cut + 1``,
skipping those at or below the cut. Its index must hold exactly the blocks the workload holds,
after the snapshot and after live traffic, and again after the follower restarts (a new run: a
new epoch). A request other than ``snapshot`` gets the protocol's refusal (cut -2) and the
socket goes on answering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgpack
import zmq

from tests.bridge.stream_out_workload import (
    PAGE,
    WINDOW,
    append,
    start_follower,
    stream_out_follower,
)

SOURCE = "worker-0"
RECV_TIMEOUT_MS = 60_000


class GapError(AssertionError):
    """A live message arrived out of order after the cut: the bootstrap is void."""


class LiveFollower:
    """What both protocols' clients do with the live stream: subscribe before asking for the
    snapshot (live messages are buffered from then on), then apply the messages after the
    snapshot's cut strictly in order. ``apply`` applies one engine batch; ``request`` is the
    snapshot socket, of the type ``kind``."""

    def __init__(
        self, context: zmq.Context[zmq.Socket[bytes]], pub: str, snapshot: str, kind: int
    ) -> None:
        self.sub = context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
        self.sub.connect(pub)
        self.request = context.socket(kind)
        self.request.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
        self.request.connect(snapshot)
        self.last = -1

    def apply(self, payload: bytes) -> None:
        """Apply one engine batch to the index."""
        raise NotImplementedError

    def follow_until(self, seq: int) -> None:
        """Apply live messages after the cut, in order, until ``seq``."""
        while self.last < seq:
            _topic, seq_bytes, payload = self.sub.recv_multipart()
            got = int.from_bytes(seq_bytes, "big")
            if got <= self.last:
                continue  # already in the snapshot
            if got != self.last + 1:
                raise GapError(f"live seq {got} after {self.last}")
            self.apply(payload)
            self.last = got

    def close(self) -> None:
        """Close both sockets."""
        self.sub.close(linger=0)
        self.request.close(linger=0)


class SnapshotClient(LiveFollower):
    """A router's index of one stream, bootstrapped by vLLM #57789's snapshot request (a
    client written from the protocol text)."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], pub: str, snapshot: str) -> None:
        super().__init__(context, pub, snapshot, zmq.REQ)
        self.blocks: set[int] = set()
        self.epoch = b""

    def ask(self, request: bytes) -> tuple[int, bytes, list[bytes]]:
        """One request: (cut, epoch, chunks)."""
        self.request.send(request)
        reply = self.request.recv_multipart()
        return int.from_bytes(reply[0], "big", signed=True), reply[1], reply[2:]

    def bootstrap(self) -> int:
        """Ask for the snapshot and apply it to a fresh index; the cut."""
        cut, epoch, chunks = self.ask(b"snapshot")
        assert cut >= -1, f"snapshot unavailable (cut {cut})"
        assert len(epoch) == 16
        self.blocks, self.epoch, self.last = set(), epoch, cut
        for chunk in chunks:
            self.apply(chunk)
        return cut

    def apply(self, payload: bytes) -> None:
        """Apply one vLLM batch ``[ts, events, data_parallel_rank]``."""
        _ts, events, _rank = msgpack.unpackb(payload)
        for event in events:
            kind: Any = event["type"]
            if kind == "BlockStored":
                self.blocks.update(event["block_hashes"])
            elif kind == "BlockRemoved":
                self.blocks.difference_update(event["block_hashes"])
            else:
                self.blocks.clear()


def test_a_router_bootstraps_from_the_follower(tmp_path: Path) -> None:
    setup = stream_out_follower(tmp_path, SOURCE, 3, "vllm", "--zmq-snapshot")
    log_url, workload, end, follow = setup.log_url, setup.workload, setup.end, setup.follow
    pub, snapshot = setup.endpoints
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    clients: list[SnapshotClient] = []
    try:
        start_follower(follow)
        follow.wait_for("applied", lambda s: s["position"].get("0") == end, 60)
        client = SnapshotClient(context, pub, snapshot)
        clients.append(client)
        # a request the protocol does not know: refused, counted, and the socket goes on
        cut, epoch, chunks = client.ask(b"snapshot-please")
        assert (cut, len(epoch), chunks) == (-2, 16, [])
        # the run started once the follower had restored (the log replayed): seq 0 is its state
        cut = client.bootstrap()
        assert cut == 0 and client.blocks == set(workload.held)
        end = append(log_url, workload.batches(30))
        client.follow_until(cut + 30)
        assert client.blocks == set(workload.held)

        assert follow.stop() == 0, follow.stderr_tail()  # a new run, from its snapshot
        start_follower(follow)
        fresh = SnapshotClient(context, pub, snapshot)
        clients.append(fresh)
        cut = fresh.bootstrap()
        assert fresh.epoch != client.epoch
        assert cut == 0 and fresh.blocks == set(workload.held)
        end = append(log_url, workload.batches(30))
        fresh.follow_until(cut + 30)
        assert fresh.blocks == set(workload.held)
    finally:
        for each in clients:
            each.close()
        follow.close()
        context.term()


class SglangSnapshotClient(LiveFollower):
    """A router's index of one worker, bootstrapped by sglang's proposed worker snapshot
    (sgl-project/sglang#34407: a client written from the protocol text)."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], pub: str, snapshot: str) -> None:
        super().__init__(context, pub, snapshot, zmq.DEALER)
        self.blocks: dict[int, int] = {}  # block hash -> component mask

    def ask(self, kind: bytes) -> list[tuple[bytes, Any]]:
        """Every ``(kind, payload)`` reply to one request, through ``end`` or ``error``."""
        self.request.send_multipart([b"", kind])
        replies: list[tuple[bytes, Any]] = []
        while not replies or replies[-1][0] not in (b"end", b"error"):
            _empty, reply_kind, payload = self.request.recv_multipart()
            replies.append((reply_kind, msgpack.unpackb(payload)))
        return replies

    def bootstrap(self, kind: bytes) -> dict[str, Any]:
        """Ask, check, and apply to a fresh index; the header."""
        replies = self.ask(kind)
        assert [k for k, _ in replies[:1]] == [b"header"], replies[:1]
        header: dict[str, Any] = replies[0][1]
        assert header["resume_seq"] == header["barrier_seq"] + 1
        records = [record for k, chunk in replies if k == b"chunk" for record in chunk]
        assert replies[-1][0] == b"end" and len(records) == header["record_count"]
        self.blocks = {}
        for record in records:
            if header["version"] == 1:
                assert record["parent_block_hash"] is None or record["parent_block_hash"] in (
                    self.blocks
                )
                for block_hash in record["block_hashes"]:
                    self.blocks[block_hash] = 1 | 2
            else:
                assert record["tier"] == 1 and record["block_size"] == header["page_size"]
                self.blocks[record["block_hash"]] = record["component_mask"]
        self.last = header["barrier_seq"]
        return header

    def apply(self, payload: bytes) -> None:
        """Apply one sglang batch ``[ts, events, attn_dp_rank]``."""
        for event in msgpack.unpackb(payload)[1]:
            if event[0] == "BlockStored":
                self.blocks.update(dict.fromkeys(event[1], 1 | 2))
            elif event[0] == "BlockRemoved":
                for block_hash in event[1]:
                    self.blocks.pop(block_hash, None)
            else:
                self.blocks.clear()


def test_sglang_snapshot_v1_and_v2(tmp_path: Path) -> None:
    setup = stream_out_follower(tmp_path, SOURCE, 5, "sglang", "--zmq-snapshot")
    log_url, workload, end, follow = setup.log_url, setup.workload, setup.end, setup.follow
    pub, snapshot = setup.endpoints
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    client: SglangSnapshotClient | None = None
    try:
        base = start_follower(follow)
        follow.wait_for("applied", lambda s: s["position"].get("0") == end, 60)
        client = SglangSnapshotClient(context, pub, snapshot)
        (kind, payload), *rest = client.ask(b"snapshot-v9")  # unknown: the protocol's error
        assert (kind, rest) == (b"error", []) and "snapshot-v9" in payload["message"]
        header = client.bootstrap(b"snapshot-v1")
        assert header["version"] == 1 and header["barrier_seq"] == 0
        assert set(client.blocks) == set(workload.held)
        header = client.bootstrap(b"snapshot-v2")
        assert header["worker_id"] == SOURCE and header["page_size"] == PAGE
        assert header["cache_spec"]["swa_window_tokens"] == WINDOW
        assert set(client.blocks) == set(workload.held)
        # version 2 carries SWA residency: a tombstoned block holds its full KV only
        sources = httpx.get(f"{base}/v1/sources", timeout=10).json()["sources"]
        full_only = sum(1 for mask in client.blocks.values() if mask == 1)
        assert full_only == sources[SOURCE]["tombstones"] > 0
        append(log_url, workload.batches(30))
        client.follow_until(header["barrier_seq"] + 30)
        assert set(client.blocks) == set(workload.held)
    finally:
        if client is not None:
            client.close()
        follow.close()
        context.term()
