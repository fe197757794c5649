"""``ZmqEgress``: the log's batches on a ZMQ PUB socket, replays answered from the durable log.

A stream run numbers its messages as an engine's publisher does: seq 0 is the run's first
message. A run may start with the follower's state (``StreamStart``): one batch per source,
``AllBlocksCleared`` then every block it holds, parent before child (what a fresh engine would
have published to reach that cache), at seqs ``0..k-1``. Each record appended to the log from
the run's start offset on follows as the engine frames ``(topic, seq, payload)``: the topic is
the batch's source, the seq is ``k`` plus the record's offset minus the start offset (so the
stream needs a single-partition log: the FileLog, or a one-partition Kafka topic), the payload
is the batch in the engine's format (``encode``). A record that does not decode is skipped
(counted), which a subscriber sees as a seq hole. A batch of a token-free source (its writer
withheld the token ids, ``--no-token-ids``) fails that source: it is sent as its clears alone
(an empty batch when it has none), so the numbering holds and no store goes out without its
tokens; each such batch of the live stream is counted (``withheld``) and the first of each
epoch logged as an error naming the source (``TokenIdsWithheldError``).

The ROUTER socket answers a replay request (8-byte big-endian start seq) as the engine's
publisher does: every message of the run from that seq on that the log still holds, then the
end marker (seq -1): ``(seq, payload)`` messages for sglang, ``(topic, seq, payload)`` for vLLM
(whose end marker has an empty topic). Any seq still in the log is served, not a fixed ring,
within bounds: a request from more than ``replay_max_records`` messages before the stream's head,
or one beyond the client's rate (``ClientRate``), gets the end marker alone (the protocol's
"nothing to replay"), counted in ``refusals``.

With a ``CurveServer`` both sockets (and the snapshot socket, which shares the context) are
CURVE servers, admitting only the listed client keys.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import anyio
import zmq
import zmq.asyncio
from anyio.abc import TaskGroup

from cache.events import AllBlocksCleared, DecodeError, EventBatch, decode_batch
from cache.events.liveness import decode_liveness, is_liveness
from log import EventLog, Position, Record
from swa_es.bridge.wire import END_SEQ_FRAME, FrameError, decode_seq, encode_seq
from swa_es.egress.config import EgressConfig, EngineFormat, TombstonePolicy, policy_error
from swa_es.egress.curve import CurveServer
from swa_es.egress.encode import encode_engine_batch
from swa_es.egress.errors import EgressError, TokenIdsWithheldError
from swa_es.egress.limits import ClientRate, client_of
from swa_es.egress.residency import BlockLookup, ResidencyStream

logger = logging.getLogger(__name__)

_REPLAY_SNDHWM = 10_000
_APPLIED_POLL_S = 0.001


def _engine_batch(record: Record) -> EventBatch:
    """What one log record says to an engine's consumer: a batch as it is; a liveness record
    (heartbeat or offline marker) an empty batch, so that it keeps its place in the stream's
    numbering and a consumer sees no seq hole. An offline marker is not sent as the engine
    format's clear: a source may go on in the same epoch after one (a bridge whose engine came
    back), and a consumer cleared then could not follow its next batches. ``DecodeError`` for
    anything else."""
    if not is_liveness(record.payload):
        return decode_batch(record.payload)
    live = decode_liveness(record.payload)
    return EventBatch(live.source, live.epoch, live.seq, record.timestamp, ())


def _clears_of(batch: EventBatch) -> EventBatch:
    """``batch`` with its ``AllBlocksCleared`` events alone and no meta: what the stream out
    sends for a token-free source's batch (a consumer drops what it held of the source)."""
    clears = tuple(event for event in batch.events if isinstance(event, AllBlocksCleared))
    return EventBatch(batch.source, batch.epoch, batch.seq, batch.ts, clears, v=batch.v)


def _encoded(
    batch: EventBatch, encode: Callable[[EventBatch], bytes]
) -> tuple[bytes, TokenIdsWithheldError | None]:
    """``batch`` encoded; a token-free source's as its clears alone (``_clears_of``), with the
    error that refused it."""
    try:
        return encode(batch), None
    except TokenIdsWithheldError as exc:
        return encode(_clears_of(batch)), exc


class EndpointBindError(EgressError):
    """A socket of the stream out could not bind ``endpoint``; ``reason`` says why (the
    command line names the flag that gave the endpoint)."""

    def __init__(self, endpoint: str, reason: str) -> None:
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(f"cannot bind {endpoint}: {reason}")


def bind_socket(socket: zmq.asyncio.Socket, endpoint: str) -> None:
    """Bind ``socket`` to ``endpoint``; on failure close it (nothing leaks from a failed start)
    and raise ``EndpointBindError``."""
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as exc:
        socket.close(linger=0)
        raise EndpointBindError(endpoint, exc.strerror or str(exc)) from exc


@dataclass(frozen=True, slots=True)
class StreamStart:
    """Where a stream run starts: the log offset of its first live record, and the state
    before it as one batch per source (``bootstrap.state_batches``)."""

    offset: int
    state: Sequence[EventBatch] = ()


@dataclass(slots=True)
class EgressMetrics:
    """Counters of the stream out."""

    published: int = 0
    undecodable: int = 0
    replay_requests: int = 0
    replayed: int = 0
    bad_requests: int = 0
    replay_unavailable: int = 0
    withheld: int = 0
    """Batches of token-free sources sent as their clears alone."""


@dataclass(frozen=True, slots=True)
class _Message:
    topic: bytes
    seq: int
    payload: bytes


class ZmqEgress:
    """See the module docstring (an async context manager owning its tasks).

    A run starts at the log's end with no state batches, or, ``deferred``, when ``begin`` is
    called (a follower calls it once restored, with its state and position). ``lookup`` reads a
    block's parent and tokens from the follower's replicas, for the ``groups`` policy's restores
    (``swa_es.egress.residency``); ``applied`` is the follower's next log offset to apply: a
    live record is then encoded only once the follower has applied it, so a restore's block is
    in the replica unless a later record removed it (whose removal then follows on the stream).
    ``curve``: the sockets are CURVE servers (None: plain).
    """

    def __init__(
        self,
        log: EventLog,
        config: EgressConfig,
        *,
        deferred: bool = False,
        lookup: BlockLookup | None = None,
        applied: Callable[[], int] | None = None,
        curve: CurveServer | None = None,
    ) -> None:
        self.log = log
        self.config = config
        self.wire_format = EngineFormat(config.wire_format)
        self.tombstones = TombstonePolicy(config.tombstones)
        refused = policy_error(self.wire_format, self.tombstones)
        if refused is not None:
            raise EgressError(refused)
        self._lookup = lookup
        self._applied = applied if self.tombstones.needs_state else None
        self._encode = self.fresh_encoder()
        self.metrics = EgressMetrics()
        self.epoch = uuid.uuid4().bytes  # names this run (16 bytes), for snapshot replies
        self._deferred = deferred
        self._start: StreamStart | None = None
        self._state: list[_Message] = []
        self._started = anyio.Event()
        self.curve = curve
        self.rate = ClientRate(config.client_requests_per_s)
        self.refusals: Counter[tuple[str, str]] = Counter()
        """Requests refused by (socket, reason), this socket's and the snapshot socket's
        (``refusal_counts`` adds CURVE's)."""
        self.context = zmq.asyncio.Context()
        """The ZMQ context of the stream out's sockets, which the snapshot socket shares (its
        ZAP handler is the one ``curve`` runs)."""
        self._pub: zmq.asyncio.Socket | None = None
        self._router: zmq.asyncio.Socket | None = None
        self._group: TaskGroup | None = None
        # per token-free source, the epoch whose withheld batches were last logged
        self._withheld_epochs: dict[str, str] = {}

    @property
    def start_offset(self) -> int | None:
        """The log offset of the run's first live record (None until the run has started)."""
        return None if self._start is None else self._start.offset

    def seq_of(self, offset: int) -> int:
        """The stream seq of the record at log ``offset`` (the run must have started)."""
        assert self._start is not None
        return len(self._state) + offset - self._start.offset

    def offset_of(self, seq: int) -> int | None:
        """The log offset of stream ``seq`` (None: one of the run's state batches)."""
        assert self._start is not None
        if seq < len(self._state):
            return None
        return self._start.offset + seq - len(self._state)

    def fresh_encoder(self) -> Callable[[EventBatch], bytes]:
        """An encoder of batches in the stream's engine format that starts a run of its own:
        fed a run's batches in order (its residency state, where the policy needs one, follows
        them)."""
        residency = ResidencyStream(self._lookup) if self.tombstones.needs_state else None
        return lambda batch: encode_engine_batch(
            batch, self.wire_format, self.tombstones, residency
        )

    def frames(self, record: Record) -> list[bytes] | None:
        """The engine frames ``(topic, seq, payload)`` of the run's next live record (None:
        undecodable)."""
        message = self._message(record, self._encode)
        if message is None:
            return None
        return [message.topic, encode_seq(message.seq), message.payload]

    def _message(
        self, record: Record, encode: Callable[[EventBatch], bytes], *, live: bool = True
    ) -> _Message | None:
        """The message of ``record`` (None: undecodable); a replay's (``live`` False) leaves
        the token-free count and log to the live stream, which sent it first."""
        try:
            batch = _engine_batch(record)
        except DecodeError as exc:
            self.metrics.undecodable += 1
            logger.warning(
                "egress: skipping undecodable record at offset %d: %s", record.offset, exc
            )
            return None
        payload = self.payload(batch, encode) if live else _encoded(batch, encode)[0]
        return _Message(batch.source.encode(), self.seq_of(record.offset), payload)

    def payload(self, batch: EventBatch, encode: Callable[[EventBatch], bytes]) -> bytes:
        """``batch`` encoded; a token-free source's batch as its clears alone (counted, and
        logged once per source and epoch)."""
        payload, withheld = _encoded(batch, encode)
        if withheld is not None:
            self.metrics.withheld += 1
            if self._withheld_epochs.get(batch.source) != batch.epoch:
                self._withheld_epochs[batch.source] = batch.epoch
                logger.error("egress: %s", withheld)
        return payload

    async def wait_started(self) -> StreamStart:
        """The run's start, once it has one."""
        await self._started.wait()
        assert self._start is not None
        return self._start

    async def __aenter__(self) -> Self:
        end = await self.log.end()
        if len(list(end.partitions())) > 1:
            raise EgressError(
                "the ZMQ stream out numbers batches by log offset and needs a single-partition "
                f"log; this one has partitions {sorted(end.partitions())}"
            )
        if self.curve is not None:
            self.curve.start(self.context)
        try:
            pub = self.socket(zmq.PUB)
            bind_socket(pub, self.config.publish_endpoint)
            self._pub = pub
            if self.config.replay_endpoint is not None:
                router = self.socket(zmq.ROUTER)
                router.setsockopt(zmq.ROUTER_MANDATORY, 1)
                router.setsockopt(zmq.SNDHWM, _REPLAY_SNDHWM)
                bind_socket(router, self.config.replay_endpoint)
                self._router = router
        except BaseException:
            self._close()
            raise
        if not self._deferred:
            self.begin(StreamStart(end.get(0)))
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._run)
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
        self._close()

    def _close(self) -> None:
        for socket in (self._pub, self._router):
            if socket is not None:
                socket.close(linger=0)
        self._pub = self._router = None
        if self.curve is not None:
            self.curve.stop()
        self.context.term()

    def socket(self, kind: int) -> zmq.asyncio.Socket:
        """A new socket of ``kind`` in the stream out's context, a CURVE server where
        ``curve`` is on (not yet bound)."""
        socket = self.context.socket(kind)
        socket.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            self.curve.apply(socket)
        return socket

    def refusal_counts(self) -> dict[tuple[str, str], int]:
        """Every refusal so far by (socket, reason): ``refusals``, and CURVE keys not listed
        (``("curve", "unlisted_key")``) where CURVE is on."""
        counts = dict(self.refusals)
        if self.curve is not None:
            counts["curve", "unlisted_key"] = self.curve.allowed.refused
        return counts

    def allowed(self, frame: zmq.Frame, identity: bytes, what: str) -> bool:
        """Whether the client that sent ``frame`` is within its request rate (a refusal is
        logged and counted as ``(what, "rate")``)."""
        client = client_of(frame, identity)
        if self.rate.allow(client):
            return True
        self.refusals[what, "rate"] += 1
        logger.warning(
            "egress: refused a %s request from %s: more than %.3g requests/s "
            "(--zmq-client-requests-per-s)",
            what,
            client.decode("ascii", "replace"),
            self.rate.per_s,
        )
        return False

    def begin(self, start: StreamStart) -> None:
        """Start the run: ``start.state`` at seqs ``0..k-1``, then the log from
        ``start.offset``. Once only."""
        if self._start is not None:
            raise EgressError("the stream run has started already")
        self._start = start
        self._state = [
            _Message(batch.source.encode(), seq, self.payload(batch, self._encode))
            for seq, batch in enumerate(start.state)
        ]
        self._started.set()

    async def _run(self) -> None:
        await self._started.wait()
        assert self._start is not None
        for message in self._state:
            await self._publish(message)
        position = Position.of({0: self._start.offset})
        async for record in self.log.read(position, follow=True):
            if self._applied is not None:
                # the follower's position has no change event; this polls only while the
                # stream is ahead of the follower
                while self._applied() <= record.offset:  # noqa: ASYNC110
                    await anyio.sleep(_APPLIED_POLL_S)
            live = self._message(record, self._encode)
            if live is not None:
                await self._publish(live)

    async def _publish(self, message: _Message) -> None:
        assert self._pub is not None
        await self._pub.send_multipart([message.topic, encode_seq(message.seq), message.payload])
        self.metrics.published += 1

    async def _serve_replays(self) -> None:
        router = self._router
        assert router is not None
        while True:
            frames = await router.recv_multipart(copy=False)
            identity, request = frames[0].bytes, frames[-1].bytes
            try:
                start = decode_seq(request, "replay request")
                if start < 0:
                    raise FrameError("replay request", f"negative start seq {start}")
            except FrameError as exc:
                self.metrics.bad_requests += 1
                logger.warning("egress: bad replay request: %s", exc)
                continue
            self.metrics.replay_requests += 1
            await self._started.wait()
            try:
                if await self._refuse(frames[-1], identity, start):
                    await router.send_multipart(self._closing(identity))
                else:
                    await self._replay(router, identity, start)
            except zmq.ZMQError as exc:  # the client went away (ROUTER_MANDATORY)
                logger.info("egress: replay to a departed client stopped: %s", exc)

    async def _head(self) -> int:
        """The stream seq the next live message will have."""
        assert self._start is not None
        return self.seq_of((await self.log.end()).get(0))

    async def _refuse(self, frame: zmq.Frame, identity: bytes, start: int) -> bool:
        """Whether a replay from ``start`` is refused: beyond the client's rate, or from
        further back than ``replay_max_records`` before the stream's head (logged)."""
        if not self.allowed(frame, identity, "replay"):
            return True
        head = await self._head()
        if head - start > self.config.replay_max_records:
            self.refusals["replay", "too_far"] += 1
            logger.warning(
                "egress: refused a replay from seq %d: %d messages before the head (seq %d), "
                "more than --zmq-replay-max-records %d; take a snapshot instead",
                start,
                head - start,
                head,
                self.config.replay_max_records,
            )
            return True
        return False

    def _closing(self, identity: bytes) -> list[bytes]:
        """The end marker of a replay to ``identity``."""
        if self.wire_format is EngineFormat.VLLM:
            return [identity, b"", b"", END_SEQ_FRAME, b""]
        return [identity, b"", END_SEQ_FRAME, b""]

    def _reply(self, identity: bytes, message: _Message) -> list[bytes]:
        seq = encode_seq(message.seq)
        if self.wire_format is EngineFormat.VLLM:
            return [identity, b"", message.topic, seq, message.payload]
        return [identity, b"", seq, message.payload]

    async def _replay_encoder(self, first: int) -> Callable[[EventBatch], bytes]:
        """An encoder at the run's log offset ``first``: where the policy keeps state, the run
        re-derived from its start (its state batches, then the log up to ``first``)."""
        encode = self.fresh_encoder()
        if not self.tombstones.needs_state:
            return encode
        assert self._start is not None
        for batch in self._start.state:
            _encoded(batch, encode)
        if self._start.offset < first:
            async for record in self.log.read(Position.of({0: self._start.offset}), follow=False):
                if record.offset >= first:
                    break
                with contextlib.suppress(DecodeError):
                    _encoded(_engine_batch(record), encode)
        return encode

    async def _replay(self, router: zmq.asyncio.Socket, identity: bytes, start: int) -> None:
        for message in self._state[start:]:
            await router.send_multipart(self._reply(identity, message))
            self.metrics.replayed += 1
        first = self.offset_of(max(start, len(self._state)))
        assert first is not None
        end = (await self.log.end()).get(0)
        if first < end:
            encode = await self._replay_encoder(first)
            async for record in self.log.read(Position.of({0: first}), follow=False):
                if record.offset >= end:
                    break
                if record.offset > first:  # retention removed the start of what was asked
                    self.metrics.replay_unavailable += 1
                    logger.info(
                        "egress: replay from seq %d: the log no longer holds offsets %d..%d",
                        start,
                        first,
                        record.offset - 1,
                    )
                first = end
                logged = self._message(record, encode, live=False)
                if logged is None:
                    continue
                await router.send_multipart(self._reply(identity, logged))
                self.metrics.replayed += 1
        await router.send_multipart(self._closing(identity))
