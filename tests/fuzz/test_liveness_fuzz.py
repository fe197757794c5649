"""Fuzzing liveness records (``cache.events.liveness``) and the follower's apply path on a
MemoryLog fed byte-mutated batches and liveness records.

``decode_liveness`` gives a ``LivenessRecord`` or a ``DecodeError`` naming the field for any
bytes behind the liveness prefix and for valid records with one field replaced. A ``Follower``
reading a MemoryLog of good batches, heartbeats and offline markers, some copies of which have
bytes flipped, cut, inserted or overwritten, never raises: it reads every record, and counts as
undecodable exactly the records the decoders refuse (the oracle: ``decode_batch`` or
``decode_liveness`` on each payload); the rest it applies, skips or marks as gaps.
(``test_record_fuzz.py`` does the same with JSON-level junk on a FileLog, and checks digests.)
"""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.events import DecodeError, decode_batch, encode_batch
from cache.events.liveness import (
    LIVENESS_PREFIX,
    LivenessRecord,
    decode_liveness,
    encode_liveness,
    heartbeat,
    is_liveness,
    offline,
)
from consumers import Follower, PrefixIndex, ReplicaSet, Stats
from log.memory import MemoryLog
from tests.consumers.primary_model import PrimaryModel
from tests.fuzz.feedback_bodies import MUTATIONS, mutate
from tests.fuzz.json_values import json_values

JSON_VALUES = json_values(integer_bound=2**70)
LIVENESS = st.one_of(
    st.builds(heartbeat, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8),
              st.integers(0, 2**63 - 1)),
    st.builds(offline, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8),
              st.integers(0, 2**63 - 1), st.text(max_size=12)),
)  # fmt: skip


def liveness_or_error(payload: bytes) -> LivenessRecord | DecodeError:
    """The record or the ``DecodeError``; any other exception fails the test."""
    try:
        return decode_liveness(payload)
    except DecodeError as error:
        assert isinstance(error.field, str) and error.reason
        return error


@settings(max_examples=300, deadline=None)
@given(tail=st.binary(max_size=200))
def test_arbitrary_bytes_behind_the_prefix(tail: bytes) -> None:
    """The liveness prefix then any bytes: a record or a ``DecodeError``."""
    liveness_or_error(LIVENESS_PREFIX + tail)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=LIVENESS, data=st.data())
def test_one_field_replaced_dropped_or_added(record: LivenessRecord, data: st.DataObject) -> None:
    """A valid liveness record round-trips; with one field replaced by any JSON value, dropped
    or added it gives a record or a ``DecodeError`` naming that field (or the whole)."""
    payload = encode_liveness(record)
    assert decode_liveness(payload) == record
    document: dict[str, Any] = json.loads(payload)
    name = data.draw(st.sampled_from([*document, "reason", "extra"]))
    action = data.draw(st.sampled_from(["replace", "drop"]))
    if action == "drop" and name in document and name != "live":
        del document[name]
    else:
        document[name] = data.draw(JSON_VALUES)
    body = json.dumps(document).encode()
    outcome = liveness_or_error(body)
    if isinstance(outcome, DecodeError) and is_liveness(body):
        assert outcome.field in (name, "", "live", "reason"), (name, str(outcome))


def _stream(rng: random.Random) -> list[tuple[str, bytes]]:
    """Good records of two sources: batches, heartbeats and an offline marker."""
    models = [PrimaryModel(f"worker-{i}") for i in range(2)]
    records = [(m.source, encode_batch(m.start_epoch())) for m in models]
    for step in range(24):
        model = rng.choice(models)
        if step % 5 == 4:
            live = heartbeat(model.source, model.epoch, model.seq)
            records.append((model.source, encode_liveness(live)))
            continue
        prompt = [rng.randrange(4) for _ in range(2)] + [rng.randrange(50) for _ in range(3)]
        events = model.store(prompt)
        if rng.random() < 0.3:
            events += model.tombstone(model.hashes(prompt)[-1:])
        records.append((model.source, encode_batch(model.batch(events))))
    last = models[0]
    records.append((last.source, encode_liveness(offline(last.source, last.epoch, last.seq, "x"))))
    return records


def _refused(payload: bytes) -> bool:
    """Whether the decoders refuse ``payload`` (the follower must count it undecodable)."""
    try:
        if is_liveness(payload):
            decode_liveness(payload)
        else:
            decode_batch(payload)
    except DecodeError:
        return True
    return False


async def _follow(records: list[tuple[str, bytes]]) -> Follower:
    log = MemoryLog(name="liveness-fuzz")
    async with log:
        await log.append_batch(records)
        replicas = ReplicaSet()
        follower = Follower(log, [replicas, PrefixIndex(replicas), Stats(replicas)])
        with anyio.fail_after(30):  # a hang fails the test
            await follower.restore()  # reads the log to its end
    return follower


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    damage=st.lists(
        st.tuples(st.integers(0, 10**6), st.lists(MUTATIONS, min_size=1, max_size=3)),
        min_size=1,
        max_size=8,
    ),
)
def test_mutated_records_through_the_follower(
    seed: int, damage: list[tuple[int, list[tuple[Any, ...]]]]
) -> None:
    """Byte-mutated copies of good batches and liveness records inserted into a MemoryLog (or
    replacing the originals): the follower reads every record without raising, and counts as
    undecodable exactly those the decoders refuse."""
    rng = random.Random(seed)
    records = _stream(rng)
    for at, mutations in damage:
        key, payload = records[at % len(records)]
        for mutation in mutations:
            payload = mutate(payload, mutation)
        if rng.random() < 0.5:
            records[at % len(records)] = (key, payload)
        else:
            records.insert(at % (len(records) + 1), (key, payload))
    follower = anyio.run(_follow, records)
    assert follower.metrics.records_read == len(records)
    assert follower.metrics.undecodable == sum(_refused(p) for _, p in records)
