"""docs/design.md §4, "Adding an event type", held true: every event type goes through each
place the checklist names, the same way in each, and every file it names exists.

The checklist's steps, checked here per type: the type is in the ``Event`` union, exported, and
declared natively (1); the codec writes and reads it in both versions, natively and in the oracle,
to the same bytes; the replica, its oracle and ``BlockModel`` agree on the digest it leads to
(2), and the ``Stats`` churn counts it alike from events and natively (3); the stream out encodes
it in each engine format, and the bridge decodes what the stream out wrote; the test strategies
draw it. When the tree emits it, the recorder's differential test against the oracle sink
(``tests/cache/test_native_recorder.py``) holds it.
A new event type fails ``test_every_event_type_has_a_sample`` until it is added to ``SAMPLES``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import get_args

import hypothesis
import pytest

import cache.events
from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    decode_batch,
    decode_event,
    decode_wire,
    encode_batch,
    event_to_dict,
)
from consumers import ReplicaSet
from consumers.views.stats import Churn
from swa_es.bridge import formats as bridge_formats
from swa_es.egress.config import EngineFormat, TombstonePolicy, policy_error
from swa_es.egress.encode import encode_engine_batch, engine_events
from swa_es.egress.residency import ResidencyStream
from swa_es.testing import BlockModel
from tests.cache.codec_strategies import EVENTS
from tests.oracles import codec as oracle_codec
from tests.oracles.replica import ReferenceReplicaSet

SOURCE = "worker-0"
H1, H2, H3, H4 = 11, -22, 33, -44

# A tree before each sample: h1 with two children, h2 (tombstoned) and h3.
PREFIX: tuple[Event, ...] = (
    AllBlocksCleared(),
    BlockStored((H1,), None, (1,), 1),
    BlockStored((H2,), H1, (2,), 1),
    BlockStored((H3,), H1, (3,), 1),
    BlockSWAEvicted((H2,)),
)

SAMPLES: dict[type, Event] = {
    BlockStored: BlockStored((H4,), H3, (4,), 1),
    BlockRemoved: BlockRemoved((H3,)),
    BlockSWAEvicted: BlockSWAEvicted((H3,)),
    BlockSWARestored: BlockSWARestored((H2,)),
    AllBlocksCleared: AllBlocksCleared(),
}
"""One event of each type that fits after ``PREFIX``."""

EVENT_TYPES = get_args(Event)


def _batches(sample: Event, v: int = 2) -> list[EventBatch]:
    opening = EventBatch(SOURCE, "e", 0, 1.0, PREFIX, meta=BatchMeta(1, 4), v=v)
    return [opening, EventBatch(SOURCE, "e", 1, 2.0, (sample,), v=v)]


def test_every_event_type_has_a_sample() -> None:
    assert set(SAMPLES) == set(EVENT_TYPES), (
        "a new event type: follow docs/design.md §4 'Adding an event type', then add a sample "
        "of it to SAMPLES here"
    )


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda cls: cls.__name__)
def test_step_1_a_frozen_dataclass_exported_by_cache_events(event_type: type) -> None:
    assert dataclasses.is_dataclass(event_type)
    assert event_type.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert getattr(cache.events, event_type.__name__) is event_type
    assert event_type.__name__ in cache.events.__all__


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("v", [1, 2])
def test_step_2_the_codec_and_its_oracle_write_and_read_it(event_type: type, v: int) -> None:
    sample = SAMPLES[event_type]
    as_dict = event_to_dict(sample)
    assert as_dict["type"] == event_type.__name__
    assert decode_event(as_dict) == sample
    for batch in _batches(sample, v):
        record = encode_batch(batch)
        assert oracle_codec.encode_batch(batch) == record
        assert decode_batch(record) == batch
        assert oracle_codec.decode_batch(record) == batch


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda cls: cls.__name__)
def test_step_3_the_replica_its_oracle_and_the_model_agree(event_type: type) -> None:
    batches = _batches(SAMPLES[event_type])
    replicas, oracle, model = ReplicaSet(), ReferenceReplicaSet(), BlockModel()
    from_events, natively = Churn(), Churn()
    for batch in batches:
        replicas.apply(batch)
        oracle.apply(batch)
        model.apply_all(batch.events)
        from_events.count(batch)
        natively.count_wire(decode_wire(encode_batch(batch)))
    digest = replicas[SOURCE].state_digest()
    assert digest == oracle.replica(SOURCE).digest.hexdigest() == model.hexdigest()
    assert from_events == natively


def _residency(tombstones: TombstonePolicy, opening: EventBatch) -> ResidencyStream | None:
    """A run's residency state that has seen its opening batch, where the policy keeps one."""
    if not tombstones.needs_state:
        return None
    residency = ResidencyStream()
    residency.vllm_groups(opening)
    return residency


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(
    ("fmt", "tombstones"),
    [
        (fmt, tombstones)
        for fmt in EngineFormat
        for tombstones in TombstonePolicy
        if policy_error(fmt, tombstones) is None
    ],
)
def test_step_4_the_stream_out_writes_it_and_the_bridge_reads_that(
    event_type: type, fmt: EngineFormat, tombstones: TombstonePolicy
) -> None:
    opening, batch = _batches(SAMPLES[event_type])[:2]
    payload = encode_engine_batch(batch, fmt, tombstones, _residency(tombstones, opening))
    decoded = bridge_formats.decode_batch(payload, bridge_formats.WireFormat(fmt.value))
    assert decoded.unknown_types == ()
    expected = engine_events(batch, fmt, tombstones, _residency(tombstones, opening))
    assert len(decoded.events) == len(expected)


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda cls: cls.__name__)
def test_step_5_the_test_strategies_draw_it(event_type: type) -> None:
    found = hypothesis.find(
        EVENTS,
        lambda events: any(isinstance(event, event_type) for event in events),
        settings=hypothesis.settings(database=None, max_examples=2000),
    )
    assert found


ROOT = Path(__file__).resolve().parent.parent


def _checklist_paths() -> list[str]:
    """Every repository path the checklist names (``a/{b,c}.rs`` expanded)."""
    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("**Adding an event type.**") : design.index("## 5. The log")]
    paths = []
    for quoted in re.findall(r"`([^`\s]+/[^`\s]*)`", section):
        head, _, rest = quoted.partition("{")
        if not rest:
            paths.append(quoted)
            continue
        choices, _, tail = rest.partition("}")
        paths.extend(head + choice + tail for choice in choices.split(","))
    return paths


def test_every_file_the_checklist_names_exists() -> None:
    paths = _checklist_paths()
    assert len(paths) > 20
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert not missing, f"docs/design.md §4 names files that do not exist: {missing}"


def test_the_stream_out_refuses_what_is_not_an_event() -> None:
    """Something that is not an event is refused, never sent as nothing."""
    with pytest.raises(TypeError, match="not an event"):
        engine_events(
            EventBatch(SOURCE, "e", 1, 2.0, ("BlockStored",)),  # type: ignore[arg-type]
            EngineFormat.VLLM,
            TombstonePolicy.KEEP,
            None,
        )
