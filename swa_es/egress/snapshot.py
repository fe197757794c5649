"""``SnapshotServer``: a router asks for the follower's state instead of replaying history.

One ROUTER socket (``swa-es follow --zmq-snapshot ENDPOINT``, beside ``--zmq-publish``) answers
the snapshot request of vLLM's proposed snapshot service (vllm-project/vllm#57789, consumed by
llm-d-router's ``pkg/kvevents/snapshot.go``) for the stream that ``ZmqEgress`` publishes:

- request: a REQ (or DEALER with an empty delimiter) sends the single frame ``snapshot``;
- reply: ``[cut, epoch, chunk_1, ..., chunk_n]``: ``cut`` the stream seq (8-byte big-endian,
  signed) of the last message the chunks include, so the client applies live messages from
  ``cut + 1`` on; ``epoch`` 16 bytes naming the stream run (a new run, a new epoch); each chunk
  an engine batch in the stream's format (the state of one source, a clear then stores, parent
  before child, at most ``CHUNK_EVENTS`` events a chunk). ``cut`` -1: nothing to apply (no
  state, nothing published yet); ``cut`` -2 or lower: unavailable, no chunks (the follower has
  not restored yet, or the request was not ``snapshot``: the protocol's refusal, counted; an
  unknown ``snapshot-v*`` kind gets sglang's ``error`` reply, counted alike).

The same socket answers sglang's proposed worker snapshot (``snapshot-v1`` / ``snapshot-v2``
from a DEALER, replies ``header``, ``chunk``..., ``end`` or ``error``: ``sglang_snapshot``),
with ``barrier_seq`` our cut and ``resume_seq`` the next seq.

The cut is consistent with the live stream: the state is read from the follower's replicas at
its position ``P`` (synchronously: the follower applies a record and advances its position
without yielding between the two), and every record below ``P`` has stream seq at most
``seq_of(P) - 1``. A live message the client buffered before the cut is skipped, one after it
applied; the stream goes on meanwhile.

Requests are bounded: at most ``snapshot_max_pending`` wait to be answered (one is answered at
a time), and each client is held to ``--zmq-client-requests-per-s`` (``ZmqEgress.allowed``);
beyond either a request gets the protocol's refusal at once (cut -2, or sglang's ``error``),
counted in the stream out's ``refusals``. The socket shares the stream out's context, so it is
a CURVE server admitting the same client keys where the stream out is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import anyio
import zmq
import zmq.asyncio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from cache.events import EventBatch
from swa_es.egress import sglang_snapshot
from swa_es.egress.stream import ZmqEgress, bind_socket

logger = logging.getLogger(__name__)

REQUEST = b"snapshot"
SGLANG_PREFIX = b"snapshot-v"
CUT_EMPTY = -1
CUT_UNAVAILABLE = -2
CHUNK_EVENTS = 4096

StateCapture = Callable[[], tuple[int, Sequence[EventBatch]] | None]
"""The follower's log position (partition 0) and its state as one batch per source; None
while it restores."""


@dataclass(slots=True)
class SnapshotMetrics:
    """Counters of the snapshot socket."""

    served: int = 0
    unavailable: int = 0
    bad_requests: int = 0


def chunks(batch: EventBatch, limit: int = CHUNK_EVENTS) -> list[EventBatch]:
    """``batch`` cut into batches of at most ``limit`` events, in order."""
    events = batch.events
    return [
        EventBatch(batch.source, batch.epoch, batch.seq, batch.ts, events[at : at + limit])
        for at in range(0, max(len(events), 1), limit)
    ]


def encode_cut(cut: int) -> bytes:
    """The 8-byte big-endian signed cut frame."""
    return cut.to_bytes(8, "big", signed=True)


class SnapshotServer:
    """See the module docstring (an async context manager owning its task)."""

    def __init__(self, egress: ZmqEgress, endpoint: str, capture: StateCapture) -> None:
        self.egress = egress
        self.endpoint = endpoint
        self.capture = capture
        self.metrics = SnapshotMetrics()
        self._router: zmq.asyncio.Socket | None = None
        self._group: TaskGroup | None = None

    async def __aenter__(self) -> Self:
        router = self.egress.socket(zmq.ROUTER)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        bind_socket(router, self.endpoint)
        self._router = router
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        pending_send, pending = anyio.create_memory_object_stream[_Request](
            self.egress.config.snapshot_max_pending
        )
        group.start_soon(self._receive, pending_send)
        group.start_soon(self._serve, pending)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
        if self._router is not None:
            self._router.close(linger=0)
            self._router = None

    def answer(self, request: bytes) -> list[bytes]:
        """vLLM #57789's reply frames (after the envelope) to one request."""
        epoch = self.egress.epoch
        if request != REQUEST:
            self._refused(request)
            return [encode_cut(CUT_UNAVAILABLE), epoch]
        captured = self._capture()
        if captured is None:
            return [encode_cut(CUT_UNAVAILABLE), epoch]
        cut, state = captured
        encode = self.egress.fresh_encoder()  # the state is a run of its own
        payloads = [
            self.egress.payload(chunk, encode)
            for batch in state
            for chunk in chunks(batch)
            if batch.events
        ]
        self.metrics.served += 1
        if cut < 0 and not payloads:
            return [encode_cut(CUT_EMPTY), epoch]
        return [encode_cut(cut), epoch, *payloads]

    def answer_sglang(self, request: bytes) -> list[tuple[bytes, bytes]]:
        """sglang's ``(kind, payload)`` replies to a ``snapshot-v*`` request."""
        if request not in sglang_snapshot.VERSIONS:
            self._refused(request)
            return sglang_snapshot.error(f"unknown snapshot request {request[:40]!r}")
        captured = self._capture()
        if captured is None:
            return sglang_snapshot.error("unavailable: the follower is restoring")
        cut, state = captured
        self.metrics.served += 1
        return sglang_snapshot.replies(
            request, list(state), cut, self.egress.epoch, self.egress.tombstones
        )

    def _refused(self, request: bytes) -> None:
        self.metrics.bad_requests += 1
        logger.warning(
            "snapshot: refused request %r (%d refused so far)",
            request[:40],
            self.metrics.bad_requests,
        )

    def _capture(self) -> tuple[int, Sequence[EventBatch]] | None:
        """(cut, state) now; None (counted) while the run has not started."""
        captured = self.capture() if self.egress.start_offset is not None else None
        if captured is None:
            self.metrics.unavailable += 1
            return None
        offset, state = captured
        return self.egress.seq_of(offset) - 1, state

    def refusal(self, request: bytes, reason: str) -> list[list[bytes]]:
        """The protocol's refusal of ``request`` (the caller counts it): cut -2, or sglang's
        ``error``."""
        logger.warning("snapshot: refused a request: %s", reason)
        if request.startswith(SGLANG_PREFIX):
            return [[kind, payload] for kind, payload in sglang_snapshot.error(reason)]
        return [[encode_cut(CUT_UNAVAILABLE), self.egress.epoch]]

    async def _receive(self, pending: MemoryObjectSendStream[_Request]) -> None:
        """Read requests; queue those within bounds, refuse the others at once."""
        router = self._router
        assert router is not None
        async with pending:
            while True:
                frames = await router.recv_multipart(copy=False)
                parts = [frame.bytes for frame in frames]
                identity, request = parts[0], parts[-1]
                envelope = [identity, b""] if len(parts) > 2 else [identity]
                queued = _Request(envelope, request)
                refused: list[list[bytes]] | None = None
                if not self.egress.allowed(frames[-1], identity, "snapshot"):
                    refused = self.refusal(request, "too many requests from this client")
                else:
                    try:
                        pending.send_nowait(queued)
                    except anyio.WouldBlock:
                        self.egress.refusals["snapshot", "busy"] += 1
                        refused = self.refusal(
                            request,
                            f"busy: {self.egress.config.snapshot_max_pending} requests waiting "
                            "(--zmq-snapshot-max-pending)",
                        )
                if refused is not None:
                    await self._send(queued.envelope, refused)

    async def _serve(self, pending: MemoryObjectReceiveStream[_Request]) -> None:
        """Answer the queued requests, one at a time."""
        async with pending:
            async for queued in pending:
                request = queued.request
                if request.startswith(SGLANG_PREFIX):
                    replies = [[kind, payload] for kind, payload in self.answer_sglang(request)]
                else:
                    replies = [self.answer(request)]
                await self._send(queued.envelope, replies)

    async def _send(self, envelope: list[bytes], replies: list[list[bytes]]) -> None:
        router = self._router
        assert router is not None
        try:
            for reply in replies:
                await router.send_multipart([*envelope, *reply])
        except zmq.ZMQError as exc:  # the client went away (ROUTER_MANDATORY)
            logger.info("snapshot: reply to a departed client dropped: %s", exc)


@dataclass(frozen=True, slots=True)
class _Request:
    """A snapshot request waiting for its answer: the reply's envelope, the request frame."""

    envelope: list[bytes]
    request: bytes
