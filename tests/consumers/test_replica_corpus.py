"""The replica corpus (tests/data/replica): nasty record streams, replayed every run.

Each stream goes through two followers over one log: the native path (``decode_wire`` into a
``WireBatch``, ``ReplicaSet.apply_wire``, the prefix index's holder sets, ``Stats`` counting
natively) and the pure-Python reference replicas (a view that takes ``EventBatch`` objects, made
for it by the follower). Both must end with the same blocks, digests, divergences, counters and
prefix answers; every record must decode the same way in the native and the reference codec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from cache.events import DecodeError, decode_wire
from consumers import Follower, PrefixIndex, ReplicaSet, Stats
from consumers.views.stats import Churn
from log import MemoryLog
from tests.consumers.reference_view import ReferenceView
from tests.data.replica.make_corpus import PROMPT, STREAMS
from tests.oracles.codec import decode_batch as reference_decode

CORPUS = Path(__file__).parents[1] / "data" / "replica"
COUNTERS = (
    "records_read",
    "batches_applied",
    "events_applied",
    "duplicates_skipped",
    "stale_skipped",
    "skipped_while_diverged",
    "undecodable",
    "gaps",
    "bad_epoch_starts",
    "inconsistent_batches",
    "digests_checked",
    "digest_mismatches",
    "digests_unverifiable",
    "divergences",
)


def _records(name: str) -> list[bytes]:
    return (CORPUS / f"{name}.jsonl").read_bytes().splitlines()


def _key(record: bytes) -> str:
    try:
        raw = orjson.loads(record)
    except orjson.JSONDecodeError:
        return "garbage"
    source = raw.get("source") if type(raw) is dict else None
    return source if type(source) is str else "garbage"


def _native_state(replicas: ReplicaSet, source: str) -> dict[str, Any]:
    tree = replicas[source]
    return {
        "blocks": {
            (b.block_hash, b.parent_block_hash, b.token_ids, b.swa_resident) for b in tree.blocks()
        },
        "digest": tree.digest_value(),
        "diverged": tree.diverged,
    }


def _reference_state(view: ReferenceView, source: str) -> dict[str, Any]:
    replica = view.replicas.replica(source)
    return {
        "blocks": {(h, b.parent, b.tokens, b.resident) for h, b in replica.blocks.items()},
        "digest": replica.digest.hexdigest(),
        "diverged": replica.diverged,
    }


def test_the_corpus_is_what_its_generator_writes() -> None:
    """The committed streams are the generator's output (run make_corpus.py after editing it)."""
    for name, make in STREAMS.items():
        expected = b"".join(line + b"\n" for line in make().lines)
        assert (CORPUS / f"{name}.jsonl").read_bytes() == expected, name


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_record_decodes_alike_in_both_codecs(name: str) -> None:
    """The same batch, or a DecodeError naming the same field, from either decoder."""
    for record in _records(name):
        try:
            expected: object = reference_decode(record)
        except DecodeError as exc:
            expected = ("error", exc.field)
        try:
            wire = decode_wire(record)
        except DecodeError as exc:
            assert expected == ("error", exc.field), record
            continue
        assert wire.to_batch() == expected, record
        churn, wire_churn = Churn(), Churn()
        churn.count(wire.to_batch())
        wire_churn.count_wire(wire)
        assert churn == wire_churn


@pytest.mark.parametrize("name", sorted(STREAMS))
async def test_native_views_equal_the_reference_on_the_stream(name: str) -> None:
    """Blocks, digests, divergences, follower counters and prefix answers agree."""
    async with MemoryLog() as log:
        for record in _records(name):
            await log.append(_key(record), record)
        replicas = ReplicaSet()
        index, stats = PrefixIndex(replicas), Stats(replicas)
        native = Follower(log, [replicas, index, stats])
        reference = ReferenceView()
        oracle = Follower(log, [reference])
        await native.catch_up()
        await oracle.catch_up()
    assert native.diverged() == oracle.diverged()
    for counter in COUNTERS:
        assert getattr(native.metrics, counter) == getattr(oracle.metrics, counter), counter
    sources = sorted(replicas)
    assert sources == sorted(reference.replicas.replicas)
    for source in sources:
        assert _native_state(replicas, source) == _reference_state(reference, source), source
    for extra_key in (None, "lora"):
        for length in (0, 1, 2, 3, 5, 8, 12):
            query = PROMPT[:length]
            matches = index.match(query, extra_key)
            got = {s: (m.full_tokens, m.swa_tokens) for s, m in matches.items()}
            assert got == reference.replicas.match(query, extra_key), (query, extra_key)
    # the state survives a snapshot round trip, holder index included
    restored = ReplicaSet()
    restored_index = PrefixIndex(restored)
    restored.load(replicas.snapshot())
    for source in sources:
        assert _native_state(restored, source) == _native_state(replicas, source)
    assert restored_index.match(PROMPT) == index.match(PROMPT)
    # stats counted natively: one batch per applied record
    counted = sum(stats.get(s).churn.batches for s in stats.sources())
    assert counted == native.metrics.batches_applied
