"""``ZmqEgress``: the log's batches on a ZMQ PUB socket, replays answered from the durable log.

Each record appended to the log after the egress starts is republished as the engine frames
``(topic, seq, payload)``: the topic is the batch's source, the seq is the record's offset in
the log (so the stream needs a single-partition log: the FileLog, or a one-partition Kafka
topic), the payload is the batch in the engine's format (``encode``). A record that does not
decode is skipped (counted), which a subscriber sees as a seq hole.

The ROUTER socket answers a replay request (8-byte big-endian start seq) with every record
still in the log from that seq on, then seq -1: ``(seq, payload)`` messages for sglang,
``(topic, seq, payload)`` for vLLM, as their publishers do. Any seq still in the log is
served, not a fixed in-memory ring.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import anyio
import zmq
import zmq.asyncio
from anyio.abc import TaskGroup

from cache.events import DecodeError, decode_batch
from log import EventLog, Position, Record
from swa_es.bridge.wire import END_SEQ_FRAME, FrameError, decode_seq, encode_seq
from swa_es.egress.encode import EngineFormat, TombstonePolicy, encode_engine_batch

logger = logging.getLogger(__name__)

_REPLAY_SNDHWM = 10_000


class EgressError(Exception):
    """The stream out cannot run on this log (for example, several partitions)."""


@dataclass(frozen=True, slots=True)
class EgressConfig:
    """Where and how the stream out is served."""

    publish_endpoint: str
    replay_endpoint: str | None = None
    wire_format: EngineFormat | str = EngineFormat.SGLANG
    tombstones: TombstonePolicy | str = TombstonePolicy.KEEP


@dataclass(slots=True)
class EgressMetrics:
    """Counters of the stream out."""

    published: int = 0
    undecodable: int = 0
    replay_requests: int = 0
    replayed: int = 0
    bad_requests: int = 0


class ZmqEgress:
    """See the module docstring (an async context manager owning its two tasks)."""

    def __init__(self, log: EventLog, config: EgressConfig) -> None:
        self.log = log
        self.config = config
        self.wire_format = EngineFormat(config.wire_format)
        self.tombstones = TombstonePolicy(config.tombstones)
        self.metrics = EgressMetrics()
        self._context = zmq.asyncio.Context()
        self._pub: zmq.asyncio.Socket | None = None
        self._router: zmq.asyncio.Socket | None = None
        self._group: TaskGroup | None = None

    def frames(self, record: Record) -> list[bytes] | None:
        """The engine frames ``(topic, seq, payload)`` of one record (None: undecodable)."""
        try:
            batch = decode_batch(record.payload)
        except DecodeError as exc:
            self.metrics.undecodable += 1
            logger.warning(
                "egress: skipping undecodable record at offset %d: %s", record.offset, exc
            )
            return None
        payload = encode_engine_batch(batch, self.wire_format, self.tombstones)
        return [batch.source.encode(), encode_seq(record.offset), payload]

    async def __aenter__(self) -> Self:
        end = await self.log.end()
        if len(list(end.partitions())) > 1:
            raise EgressError(
                "the ZMQ stream out numbers batches by log offset and needs a single-partition "
                f"log; this one has partitions {sorted(end.partitions())}"
            )
        pub = self._context.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.bind(self.config.publish_endpoint)
        self._pub = pub
        if self.config.replay_endpoint is not None:
            router = self._context.socket(zmq.ROUTER)
            router.setsockopt(zmq.LINGER, 0)
            router.setsockopt(zmq.ROUTER_MANDATORY, 1)
            router.setsockopt(zmq.SNDHWM, _REPLAY_SNDHWM)
            router.bind(self.config.replay_endpoint)
            self._router = router
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._tail, end)
        if self._router is not None:
            group.start_soon(self._serve_replays)
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
        for socket in (self._pub, self._router):
            if socket is not None:
                socket.close(linger=0)
        self._context.term()

    async def _tail(self, start: Position) -> None:
        assert self._pub is not None
        async for record in self.log.read(start, follow=True):
            frames = self.frames(record)
            if frames is not None:
                await self._pub.send_multipart(frames)
                self.metrics.published += 1

    async def _serve_replays(self) -> None:
        router = self._router
        assert router is not None
        while True:
            parts = await router.recv_multipart()
            identity, request = parts[0], parts[-1]
            try:
                start = decode_seq(request, "replay request")
                if start < 0:
                    raise FrameError("replay request", f"negative start seq {start}")
            except FrameError as exc:
                self.metrics.bad_requests += 1
                logger.warning("egress: bad replay request: %s", exc)
                continue
            self.metrics.replay_requests += 1
            try:
                await self._replay(router, identity, start)
            except zmq.ZMQError as exc:  # the client went away (ROUTER_MANDATORY)
                logger.info("egress: replay to a departed client stopped: %s", exc)

    async def _replay(self, router: zmq.asyncio.Socket, identity: bytes, start: int) -> None:
        end = (await self.log.end()).get(0)
        vllm = self.wire_format is EngineFormat.VLLM
        if start < end:
            async for record in self.log.read(Position.of({0: start}), follow=False):
                if record.offset >= end:
                    break
                frames = self.frames(record)
                if frames is None:
                    continue
                topic, seq, payload = frames
                reply = (
                    [identity, b"", topic, seq, payload] if vllm else [identity, b"", seq, payload]
                )
                await router.send_multipart(reply)
                self.metrics.replayed += 1
        closing = (
            [identity, b"", b"", END_SEQ_FRAME, b""]
            if vllm
            else [identity, b"", END_SEQ_FRAME, b""]
        )
        await router.send_multipart(closing)
