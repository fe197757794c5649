"""``Bridge``: subscribe to an engine's KV-event publisher and append its batches to our log.

Each engine batch becomes one of our batches (``source``, ``epoch``, ``seq``) through a
``Publisher`` driven by a ``MirrorCache``. The engine's seq decides the rest (see
``sequencer``):

- on connect, and on every seq gap, the bridge asks the replay socket for what it missed;
- a gap the replay cannot fill (or a batch that cannot be decoded or translated) is passed on:
  the epoch skips a seq, followers mark the source diverged, and the bridge waits for an
  ``AllBlocksCleared`` or an engine restart to open a trusted epoch again;
- history before the first seq it can get (a bridge started after the replay buffer rolled
  over) opens an *unknown* epoch, which followers distrust the same way;
- a seq going backwards is an engine restart: a new epoch, rebuilt from the new run's seq 0.
  The old epoch ends with an offline marker, so followers stop offering its blocks at once.

Liveness (``cache.events.liveness``): the epoch's publisher appends a heartbeat when idle
(``heartbeat_s``). The engine counts as heard when a live message or a replay answer arrives
(without a replay socket: while its connection is up); once it was unheard for
``engine_timeout_s`` the bridge appends an offline marker for it and its heartbeats stop, until
the engine is heard again (checked after any restart it shows was handled, so an old run's
blocks are never declared alive again). A clean stop of the bridge ends with an offline marker.
While nothing at all is heard (no connection to the engine's endpoint, or a connection that has
delivered nothing yet), a warning naming the endpoint is logged every ``silence_warning_s``, so
a bridge pointed where no engine publishes says so.

Where the engine's sockets are CURVE servers, ``curve`` makes both of the bridge's sockets
CURVE clients (``swa_es.bridge.curve``); an engine publishing without CURVE belongs on ``ipc://``
or loopback on its own host.

It must run on the asyncio backend (pyzmq's asyncio sockets).
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Self

import anyio
import zmq
import zmq.asyncio
from anyio.abc import TaskGroup, TaskStatus
from zmq.utils.monitor import parse_monitor_message

from log import EventLog
from swa_es.bridge.curve import CurveClient
from swa_es.bridge.formats import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    EngineCleared,
    WireFormat,
    decode_batch,
)
from swa_es.bridge.metrics import BridgeMetrics
from swa_es.bridge.mirror import MirrorCache, MirrorError
from swa_es.bridge.sequencer import StreamTracker, Verdict
from swa_es.bridge.wire import END_SEQ, Frame, FrameError, encode_seq, parse_live, parse_replay
from swa_es.publish.config import PublisherConfig
from swa_es.publish.overflow import Backpressure, OverflowPolicy
from swa_es.publish.publisher import Publisher

logger = logging.getLogger(__name__)

DEFAULT_REPLAY_TIMEOUT_S = 5.0
DEFAULT_IDLE_PROBE_S = 2.0
DEFAULT_ENGINE_TIMEOUT_S = 10.0
DEFAULT_SILENCE_WARNING_S = 10.0
_SUB_HWM = 1_000_000


class Bridge:
    """Bridges one engine stream into ``log`` as ``source`` (an async context manager).

    ``page_size`` is used in the epoch meta until the engine's first stored block tells it.
    After ``idle_probe_s`` without a live message the bridge asks the replay socket for
    anything newer (and re-checks the last batch it applied), so messages lost to a slow join
    or an engine restart are not left unnoticed while the engine is quiet.
    ``run()`` reads until cancelled; leaving the context flushes every batch appended so far.
    ``heartbeat_s`` (None: none) and ``engine_timeout_s`` (None: never declared offline): see
    the module docstring. ``curve``: the engine's sockets are CURVE servers (None: plain).
    ``token_ids=False``: a token-free source, whose batches carry no token ids (the hashes are
    ours, computed here from the engine's tokens; ``PublisherConfig.token_ids``).
    """

    def __init__(
        self,
        log: EventLog,
        *,
        endpoint: str,
        source: str,
        replay_endpoint: str | None = None,
        wire_format: WireFormat | str = WireFormat.AUTO,
        page_size: int | None = None,
        replay_timeout_s: float = DEFAULT_REPLAY_TIMEOUT_S,
        idle_probe_s: float = DEFAULT_IDLE_PROBE_S,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_queue_batches: int = 1024,
        heartbeat_s: float | None = None,
        engine_timeout_s: float | None = DEFAULT_ENGINE_TIMEOUT_S,
        silence_warning_s: float | None = DEFAULT_SILENCE_WARNING_S,
        curve: CurveClient | None = None,
        token_ids: bool = True,
    ) -> None:
        if type(source) is not str or not source:
            raise ValueError(f"source: expected a non-empty str, got {source!r}")
        _check_endpoint("zmq", endpoint)
        if replay_endpoint is not None:
            _check_endpoint("replay", replay_endpoint)
        if page_size is not None and (type(page_size) is not int or page_size < 1):
            raise ValueError(f"page_size: expected a positive int, got {page_size!r}")
        self.log = log
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.source = source
        self.wire_format = WireFormat.parse(wire_format)
        self.page_size = page_size
        self.replay_timeout_s = replay_timeout_s
        self.idle_probe_s = idle_probe_s
        self.max_payload_bytes = max_payload_bytes
        self.max_queue_batches = max_queue_batches
        if engine_timeout_s is not None and not engine_timeout_s > 0:
            raise ValueError(
                f"engine_timeout_s: expected a positive number, got {engine_timeout_s!r}"
            )
        self.heartbeat_s = heartbeat_s
        self.token_ids = token_ids
        self.engine_timeout_s = engine_timeout_s
        # liveness of the engine: when it was last heard (time.monotonic), whether its SUB
        # connection is up, and whether the log says it is online
        self._engine_heard = time.monotonic()
        self._connected = False
        self._engine_online = True
        self._same_run = False  # since the engine went offline: its replay proved the same run
        # what an operator is told of an engine never heard (see the module docstring)
        self.silence_warning_s = silence_warning_s
        self.connected_once = False
        """Whether the SUB socket ever connected to ``endpoint``."""
        self.heard_at: float | None = None
        """When (time.monotonic) a live message or a replay answer last arrived (None: never)."""
        self._silence_since = time.monotonic()
        self._silence_warned: float | None = None
        self.metrics = BridgeMetrics()
        self.mirror = MirrorCache()
        self.tracker = StreamTracker()
        self.curve = curve
        self._context = zmq.asyncio.Context()
        self._sub: zmq.asyncio.Socket | None = None
        self._sub_monitor: zmq.asyncio.Socket | None = None
        self._reconnected = False
        self._dealer: zmq.asyncio.Socket | None = None
        self._publisher: Publisher | None = None
        self._hosts: TaskGroup | None = None
        self._close_requested: anyio.Event | None = None
        self._publisher_closed: anyio.Event | None = None
        self._lost: str | None = None

    # --- state ------------------------------------------------------------------------------

    @property
    def publisher(self) -> Publisher | None:
        """The publisher of the current epoch (None before the first one)."""
        return self._publisher

    @property
    def lost(self) -> str | None:
        """Why the source's state is unknown now (None: followers can trust it)."""
        return self._lost

    # --- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, _SUB_HWM)
        sub.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            self.curve.apply(sub)
        sub.subscribe(b"")
        self._sub_monitor = sub.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED)
        sub.connect(self.endpoint)
        self._sub = sub
        if self.replay_endpoint is not None:
            self._dealer = self._new_dealer()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._sub is not None:
            self._sub.disable_monitor()
        for socket in (self._sub_monitor, self._sub, self._dealer):
            if socket is not None:
                socket.close(linger=0)
        self._context.term()

    def _new_dealer(self) -> zmq.asyncio.Socket:
        assert self.replay_endpoint is not None
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RCVHWM, 0)
        if self.curve is not None:
            self.curve.apply(dealer)
        dealer.connect(self.replay_endpoint)
        return dealer

    async def run(self) -> None:
        """Replay what the engine still has, then apply live messages until cancelled.

        However it ends, what was appended is flushed first (cancellation included: SIGTERM
        ends a bridge cleanly).
        """
        assert self._sub is not None, "use the bridge inside `async with`"
        async with anyio.create_task_group() as hosts:
            self._hosts = hosts
            try:
                await self._read()
            finally:
                # The host task flushes and closes the publisher; the group waits for it.
                if self._publisher is not None:
                    self._publisher.mark_offline("the bridge stopped")
                if self._close_requested is not None:
                    self._close_requested.set()
                self._publisher = None

    async def _read(self) -> None:
        assert self._sub is not None
        await self._catch_up(0, until=None)
        while True:
            parts: list[bytes] | None = None
            with anyio.move_on_after(self.idle_probe_s):
                parts = await self._sub.recv_multipart()
            if parts is None:
                # Quiet: ask the replay socket whether something was published that never
                # reached us (a slow join after an engine restart), and check the last batch.
                await self._note_reconnects()
                if self._dealer is not None:
                    await self._catch_up(self._expected(), until=None)
                self._check_engine()
                self._warn_if_silent()
                continue
            self.metrics.received += 1
            self._engine_heard = self.heard_at = time.monotonic()
            await self._note_reconnects()
            try:
                frame = parse_live(parts)
            except FrameError as exc:
                self.metrics.undecodable += 1
                logger.warning("bridge %r: unreadable live message: %s", self.source, exc)
                continue
            await self._on_live(frame)
            self._check_engine()

    # --- liveness -----------------------------------------------------------------------------

    def _warn_if_silent(self) -> None:
        """Every ``silence_warning_s`` while the engine's endpoint is not connected and nothing
        was heard for that long, and once for a connection that delivered nothing yet: a
        warning naming the endpoint."""
        period = self.silence_warning_s
        now = time.monotonic()
        quiet_s = now - (self._silence_since if self.heard_at is None else self.heard_at)
        if period is None or quiet_s < period:
            return
        if self._connected:
            if self.heard_at is not None or self._silence_warned is not None:
                return  # an idle engine that has spoken, or told once already
            logger.warning(
                "bridge %r: connected to %s, but no KV event received in %.0f s (is the engine "
                "publishing there, in the --format expected?)",
                self.source,
                self.endpoint,
                quiet_s,
            )
        else:
            if self._silence_warned is not None and now - self._silence_warned < period:
                return
            replay = "" if self.replay_endpoint is None else f" (replay {self.replay_endpoint})"
            logger.warning(
                "bridge %r: nothing heard from the engine for %.0f s: no connection to %s%s; "
                "is the engine running and publishing its KV events there?",
                self.source,
                quiet_s,
                self.endpoint,
                replay,
            )
        self._silence_warned = now

    def _check_engine(self) -> None:
        """Declare the engine offline in the log once unheard for ``engine_timeout_s``; online
        again once heard and known to be the same run (its replay still holds the batch last
        applied) or once a batch was published since (called where any restart it showed has
        been handled). An engine heard with an empty replay buffer may be a new run that has
        published nothing yet: it stays offline until it publishes, so the old run's blocks
        are never offered again."""
        now = time.monotonic()
        if self._dealer is None and self._connected:
            self._engine_heard = now  # nothing else to ask: a live connection is all we know
        timeout = self.engine_timeout_s
        silent = timeout is not None and now - self._engine_heard >= timeout
        publisher = self._publisher
        if silent and self._engine_online and publisher is not None:
            self._engine_online = False
            self._same_run = False
            self.metrics.engine_offline += 1
            logger.warning(
                "bridge %r: the engine was not heard for %.1f s: marked offline",
                self.source,
                now - self._engine_heard,
            )
            publisher.mark_offline(f"engine unheard for {timeout:g} s")
        elif not silent and not self._engine_online:
            if publisher is not None and not publisher.online and not self._same_run:
                return  # heard, but maybe a new run: wait for its batches or its replay
            self._engine_online = True
            logger.info("bridge %r: the engine is heard again", self.source)
            if publisher is not None:
                publisher.mark_online()

    # --- sequencing ---------------------------------------------------------------------------

    async def _on_live(self, frame: Frame) -> None:
        verdict = self.tracker.classify(frame.seq, frame.payload)
        if verdict is Verdict.DUPLICATE:
            self.metrics.duplicates += 1
            return
        # After the SUB lost its connection even the next seq proves nothing: the engine may
        # be a new run whose first messages were lost to the slow join of the reconnect.
        unverified, self._reconnected = self._reconnected, False
        if verdict is Verdict.RESTART:
            await self._restart(f"live batch {frame.seq} is not the one applied")
            verdict = Verdict.FIRST
        if verdict is Verdict.FIRST:
            if frame.seq > 0:
                await self._catch_up(0, until=frame.seq)
        elif verdict is Verdict.GAP or unverified:
            if verdict is Verdict.GAP:
                self.metrics.gaps += 1
            if unverified and self._dealer is None:
                await self._give_up(
                    "the engine connection dropped, and without a replay socket a restart "
                    "cannot be told from a reconnect"
                )
            else:
                await self._catch_up(self._expected(), until=frame.seq)
        await self._handle(frame)

    async def _note_reconnects(self) -> None:
        """Drain the SUB's monitor; a dropped connection makes the next batch unverified."""
        monitor = self._sub_monitor
        assert monitor is not None
        while await monitor.poll(0):
            event = parse_monitor_message(await monitor.recv_multipart())
            if event["event"] == zmq.EVENT_CONNECTED:
                self._connected = self.connected_once = True
                self._engine_heard = time.monotonic()
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self._connected = False
                self.metrics.disconnects += 1
                self._reconnected = True
                logger.info("bridge %r: the engine connection dropped", self.source)

    def _expected(self) -> int:
        return 0 if self.tracker.expected is None else self.tracker.expected

    async def _catch_up(self, start: int, *, until: int | None) -> None:
        """Apply replayed batches from ``start`` (below ``until``); what stays missing is a gap
        passed on.

        A gap fill (``start > 0``) asks from the last batch already applied, so that an engine
        restart shows (see ``_replay_after``) and the new run is rebuilt from its seq 0.
        """
        if start > 0:
            frames = await self._replay_after(start - 1)
        else:
            frames = await self._replay(0) or []
        for frame in frames:
            if (until is not None and frame.seq >= until) or frame.seq < self._expected():
                continue
            if frame.seq > self._expected():
                self.metrics.gaps += 1
                await self._give_up(
                    f"engine batches {self._expected()}..{frame.seq - 1} are not replayable"
                )
                self.tracker.expected = frame.seq
            await self._handle(frame)
        if until is not None and self._expected() < until:
            missing = f"{self._expected()}..{until - 1}"
            await self._give_up(f"engine batches {missing} are not replayable")
            self.tracker.expected = until

    async def _replay_after(self, applied: int) -> list[Frame]:
        """What the replay socket has from ``applied`` (the last batch applied) on; after an
        engine restart, the new run's batches from seq 0 (the restart already handled).

        A replay buffer always keeps the engine's newest batches, so within one run the answer
        starts with ``applied`` itself. The run changed when that batch is another one (the
        new run got past our seq before we heard from it), or when the answer is empty while
        the engine does have batches (the new run has not reached our seq: the restart went
        unheard, its first messages lost to the slow join of a reconnecting SUB). An engine
        whose buffer is empty tells nothing either way: nothing changes until it publishes.
        """
        answer = await self._replay(applied)
        if not answer:
            if answer is None:
                return []
            fresh = await self._replay(0)
            if not fresh:
                return []
            if any(f.seq == applied and self.tracker.matches(f.seq, f.payload) for f in fresh):
                self._same_run = True
                return [f for f in fresh if f.seq >= applied]  # it got there meanwhile
            await self._restart(
                f"the replay has no batch {applied} but has {fresh[0].seq}..{fresh[-1].seq}"
            )
            return fresh
        first = answer[0]
        if first.seq != applied or self.tracker.matches(first.seq, first.payload):
            self._same_run = first.seq == applied
            return answer
        await self._restart(f"its batch {applied} is not the one applied")
        return await self._replay(0) or []

    async def _restart(self, evidence: str) -> None:
        logger.warning(
            "bridge %r: the engine restarted (%s; expected next %s): a new epoch",
            self.source,
            evidence,
            self.tracker.expected,
        )
        self.metrics.restarts += 1
        if self._publisher is not None:  # followers stop offering the old run's blocks now
            self._publisher.mark_offline("the engine restarted")
        await self._close_publisher()
        self.mirror.reset()
        self.tracker.reset()
        self._lost = None
        self.metrics.unknown = 0

    async def _replay(self, start: int) -> list[Frame] | None:
        """Every batch the replay socket has from ``start``; None without a replay socket or
        when it does not answer in time."""
        if self._dealer is None:
            return None
        self.metrics.replay_requests += 1
        frames: list[Frame] = []
        with anyio.move_on_after(self.replay_timeout_s) as scope:
            await self._dealer.send_multipart([b"", encode_seq(start)])
            while True:
                parts = await self._dealer.recv_multipart()
                self._engine_heard = self.heard_at = time.monotonic()
                try:
                    frame = parse_replay(parts)
                except FrameError as exc:
                    self.metrics.undecodable += 1
                    logger.warning("bridge %r: unreadable replay message: %s", self.source, exc)
                    continue
                if frame.seq == END_SEQ:
                    return frames
                self.metrics.replayed += 1
                frames.append(frame)
        if scope.cancelled_caught:
            # A late answer must not be read as the next one: start a fresh socket.
            self.metrics.replay_timeouts += 1
            logger.warning(
                "bridge %r: replay from %d timed out after %.1f s (no answer from %s)",
                self.source,
                start,
                self.replay_timeout_s,
                self.replay_endpoint,
            )
            self._dealer.close(linger=0)
            self._dealer = self._new_dealer()
            return None
        return frames

    # --- one engine batch ---------------------------------------------------------------------

    async def _handle(self, frame: Frame) -> None:
        self.tracker.accept(frame.seq, frame.payload)
        try:
            batch = decode_batch(
                frame.payload, self.wire_format, max_payload_bytes=self.max_payload_bytes
            )
        except FrameError as exc:
            self.metrics.undecodable += 1
            logger.warning(
                "bridge %r: undecodable engine batch at seq %d: %s", self.source, frame.seq, exc
            )
            await self._give_up(f"engine batch {frame.seq} could not be decoded: {exc}")
            return
        if batch.unknown_types:
            self.metrics.unknown_events += len(batch.unknown_types)
            logger.info(
                "bridge %r: skipped event type(s) %s at seq %d",
                self.source,
                sorted(set(batch.unknown_types)),
                frame.seq,
            )
        events = batch.events
        if self._lost is not None:
            clears = [i for i, event in enumerate(events) if isinstance(event, EngineCleared)]
            if not clears:
                return
            await self._close_publisher()
            self.mirror.reset()
            self._lost = None
            self.metrics.unknown = 0
            logger.info("bridge %r: the engine cleared its cache; trusted again", self.source)
            events = events[clears[-1] :]
        try:
            for event in events:
                self.mirror.apply(event)
        except MirrorError as exc:
            await self._give_up(f"engine batch {frame.seq}: {exc}")
            return
        self.metrics.batches_applied += 1
        await self._step()

    async def _give_up(self, reason: str) -> None:
        """The state can no longer be followed exactly: tell followers, wait for a clear."""
        if self._lost is not None:
            return
        logger.warning("bridge %r: source state unknown: %s", self.source, reason)
        self._lost = reason
        self.metrics.unfilled_gaps += 1
        self.metrics.unknown = 1
        self.mirror.reset()
        if self._publisher is not None:
            self._publisher.publish_gap()
        else:
            await self._open_publisher(trusted=False)

    # --- epochs -------------------------------------------------------------------------------

    async def _step(self) -> None:
        if self._publisher is not None and self.mirror.meta_stale:
            # The engine's events changed how its batches read (it began reporting SWA
            # residency): a new epoch, opened with the mirror's snapshot, carries the new meta.
            await self._close_publisher()
        if self._publisher is None:
            if not self.mirror.page_size and self.page_size is None:
                return  # nothing stored yet: the epoch opens once the block size is known
            await self._open_publisher(trusted=True)
            return  # the epoch's opening is the mirror's snapshot: it holds this batch
        while True:
            try:
                self._publisher.step()
                return
            except Backpressure:
                await self._publisher.wait_ready()

    async def _open_publisher(self, *, trusted: bool) -> None:
        assert self._hosts is not None
        self._close_requested, self._publisher_closed = anyio.Event(), anyio.Event()
        await self._hosts.start(
            self._host_publisher, trusted, self._close_requested, self._publisher_closed
        )

    async def _host_publisher(
        self,
        trusted: bool,
        close_requested: anyio.Event,
        closed: anyio.Event,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own one epoch's ``Publisher`` until asked to close; shielded, so a cancelled bridge
        still flushes what it appended."""
        publisher = Publisher(
            self.mirror,
            self.log,
            self.source,
            meta=self.mirror.meta(self.page_size),
            trusted_start=trusted,
            config=PublisherConfig(
                overflow=OverflowPolicy.BLOCK,
                max_queue_batches=self.max_queue_batches,
                heartbeat_s=self.heartbeat_s,
                token_ids=self.token_ids,
            ),
        )
        try:
            with anyio.CancelScope(shield=True):
                async with publisher:
                    self._publisher = publisher
                    self.metrics.epochs += 1
                    logger.info(
                        "bridge %r: epoch %s opened (%s)",
                        self.source,
                        publisher.epoch,
                        "trusted" if trusted else "unknown",
                    )
                    task_status.started()
                    await close_requested.wait()
        finally:
            closed.set()

    async def _close_publisher(self) -> None:
        """Flush and close the current epoch's publisher (none: nothing to do)."""
        if self._publisher is None:
            return
        assert self._close_requested is not None and self._publisher_closed is not None
        self._publisher = None
        self._close_requested.set()
        await self._publisher_closed.wait()


def _check_endpoint(name: str, endpoint: str) -> None:
    if not isinstance(endpoint, str) or not endpoint.startswith(("tcp://", "ipc://")):
        raise ValueError(f"{name}: expected a tcp:// or ipc:// endpoint, got {endpoint!r}")
