"""Fuzzing the bridge's ZMQ input: every message ends as an applied batch, a counted
``FrameError`` or a ``MirrorError`` (the source marked unknown), never another exception or a
hang.

``tests/data/fuzz/zmq/*.msgpack`` is a corpus replayed on every run: each file is a msgpack map
``{"format": "sglang"|"vllm"|"auto", "frames": [bin, ...]}``, one multipart message as a SUB
socket receives it. It is replayed through the decoding path offline, and through a running
``Bridge`` from a real PUB socket.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
import zmq
import zmq.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from log import open_log
from swa_es.bridge.formats import WireFormat, decode_batch
from swa_es.bridge.ingest import Bridge
from swa_es.bridge.mirror import MirrorCache, MirrorError
from swa_es.bridge.wire import FrameError, parse_live, parse_replay

CORPUS = Path(__file__).resolve().parents[1] / "data" / "fuzz" / "zmq"


class Outcome(enum.Enum):
    APPLIED = "applied"
    UNDECODABLE = "undecodable"
    UNTRANSLATABLE = "untranslatable"


def ingest_offline(frames: list[bytes], fmt: WireFormat, mirror: MirrorCache) -> Outcome:
    """What the bridge does with one live message, short of the log."""
    try:
        batch = decode_batch(parse_live(frames).payload, fmt)
    except FrameError:
        return Outcome.UNDECODABLE
    try:
        for event in batch.events:
            mirror.apply(event)
    except MirrorError:
        mirror.reset()
        return Outcome.UNTRANSLATABLE
    return Outcome.APPLIED


def load_corpus() -> list[tuple[str, WireFormat, list[bytes]]]:
    cases = []
    for path in sorted(CORPUS.glob("*.msgpack")):
        entry = msgpack.unpackb(path.read_bytes(), raw=False)
        cases.append((path.stem, WireFormat.parse(entry["format"]), list(entry["frames"])))
    assert cases, f"no corpus in {CORPUS}"
    return cases


@pytest.mark.parametrize(("name", "fmt", "frames"), load_corpus(), ids=lambda v: str(v)[:40])
def test_corpus_message_is_read_or_refused_by_name(
    name: str, fmt: WireFormat, frames: list[bytes]
) -> None:
    """Each corpus message decodes, or raises a typed error; the corpus names what it is."""
    outcome = ingest_offline(frames, fmt, MirrorCache())
    if name == "unknown_event_type":
        assert outcome is Outcome.APPLIED
    elif name in {"stored_unknown_parent", "removed_unknown_hash"}:
        assert outcome in {Outcome.UNTRANSLATABLE, Outcome.APPLIED}
    elif name not in {"ts_nan", "map_keys_int", "seq_all_ones_live"}:
        assert outcome is Outcome.UNDECODABLE, name


# --- hypothesis ---------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.binary(max_size=40),
    st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "GPU", "CPU"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        *("type", "block_hashes", "parent_block_hash", "token_ids"),
                        *("block_size", "medium", "lora_name", "extra_keys", "ts", "events"),
                    ]
                ),
                st.text(max_size=6),
                st.integers(min_value=-(2**63), max_value=2**64 - 1),
            ),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=30,
)
page = st.lists(st.integers(min_value=0, max_value=2**32 - 1), min_size=2, max_size=2)
sglang_event = st.one_of(
    st.tuples(
        st.just("BlockStored"),
        st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=2),
        st.one_of(st.none(), st.integers(min_value=0, max_value=20)),
        st.lists(st.integers(min_value=0, max_value=9), min_size=2, max_size=4),
        st.sampled_from([1, 2]),
        st.none(),
        st.sampled_from(["GPU", "CPU"]),
    ).map(list),
    st.tuples(st.just("BlockRemoved"), st.lists(st.integers(0, 20), min_size=1)).map(list),
    st.just(["AllBlocksCleared"]),
    values,
)
batches = st.tuples(
    st.one_of(st.floats(), values), st.one_of(st.lists(sglang_event, max_size=5), values)
).map(list)


def pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=64), max_size=5),
    fmt=st.sampled_from(list(WireFormat)),
)
def test_arbitrary_frames_never_crash(frames: list[bytes], fmt: WireFormat) -> None:
    """Arbitrary multipart messages: a typed error or a batch, live or replayed."""
    ingest_offline(frames, fmt, MirrorCache())
    with contextlib.suppress(FrameError):
        parse_replay(frames)


@settings(max_examples=400, deadline=None)
@given(
    stream=st.lists(batches, min_size=1, max_size=8),
    fmt=st.sampled_from(list(WireFormat)),
)
def test_structured_batches_never_crash(stream: list[Any], fmt: WireFormat) -> None:
    """Batch-shaped msgpack with wrong types, counts and chains, applied in order to one
    mirror as the bridge does."""
    mirror = MirrorCache()
    for seq, batch in enumerate(stream):
        ingest_offline([b"", seq.to_bytes(8, "big"), pack(batch)], fmt, mirror)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(list(WireFormat)))
def test_mutated_valid_batches_never_crash(data: st.DataObject, fmt: WireFormat) -> None:
    """A valid batch with bytes flipped, cut or inserted."""
    valid = bytearray(
        pack([1.0, [["BlockStored", [5, 6], None, [1, 2, 3, 4], 2, None, "GPU"], ["X", 1]]])
    )
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(valid) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            valid[index] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del valid[index:]
            if not valid:
                break
        else:
            valid[index:index] = data.draw(st.binary(min_size=1, max_size=4))
    ingest_offline([b"", b"\x00" * 8, bytes(valid)], fmt, MirrorCache())


# --- through a running bridge --------------------------------------------------------------


async def poll_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the caller's ``fail_after`` bounds the wait)."""
    while True:
        if condition():
            return
        await anyio.sleep(0.05)


async def test_corpus_through_a_running_bridge(tmp_path: Path) -> None:
    """The whole corpus from a real PUB socket: the bridge keeps running, counts every
    message received and every unreadable one, and a later valid batch is still applied."""
    corpus = [case for case in load_corpus() if case[2]]  # ZMQ cannot send zero frames
    endpoint = f"ipc://{tmp_path}/engine.pub"
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    pub.bind(endpoint)
    probe = [b"", (0).to_bytes(8, "big"), pack([0.0, [["AllBlocksCleared"]]])]
    try:
        async with (
            await open_log(f"file://{tmp_path}/log") as log,
            Bridge(log, endpoint=endpoint, source="fuzz", wire_format="auto") as bridge,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(bridge.run)
            with anyio.fail_after(30):
                while bridge.metrics.received == 0:  # the slow joiner: until one arrives
                    await pub.send_multipart(probe)
                    await anyio.sleep(0.05)
                await anyio.sleep(0.2)
                baseline = bridge.metrics.received
                unreadable = bridge.metrics.undecodable
                seq = 0
                for _, _, frames in corpus:
                    if len(frames) == 3 and len(frames[1]) == 8 and frames[1] != b"\xff" * 8:
                        seq += 1  # consecutive, so each batch is decoded (no gap, no duplicate)
                        frames = [frames[0], seq.to_bytes(8, "big"), frames[2]]
                    await pub.send_multipart(frames)
                final = [b"", (seq + 1).to_bytes(8, "big"), pack([0.0, [["AllBlocksCleared"]]])]
                await pub.send_multipart(final)
                # The tracker moves on as a batch's handling starts, before the clear closes
                # the untrusted epoch (an await), so ``expected`` passing the final batch does
                # not mean it was handled. One reader handles messages in order: once a batch
                # after it is taken, the final one is done. An empty batch neither clears nor
                # loses the state, so it cannot hide what the final one did.
                sentinel = [b"", (seq + 2).to_bytes(8, "big"), pack([0.0, []])]
                await pub.send_multipart(sentinel)
                await poll_until(lambda: bridge.tracker.expected == seq + 3)
            # Late copies of the probe may add to ``received``, never to ``undecodable``.
            assert bridge.metrics.received >= baseline + len(corpus) + 2
            offline = [ingest_offline(f, WireFormat.AUTO, MirrorCache()) for _, _, f in corpus]
            refused = sum(outcome is Outcome.UNDECODABLE for outcome in offline)
            assert bridge.metrics.undecodable - unreadable == refused
            assert bridge.lost is None  # the final AllBlocksCleared made it exact again
            tasks.cancel_scope.cancel()
    finally:
        pub.close(linger=0)
        context.term()
