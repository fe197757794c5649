"""Fuzzing what a log carries: valid frames holding invalid JSON or invalid batches.

The frames are sound (the log returns every record), so the damage is in the payloads. A
follower must count each bad record as undecodable, skip it, and still bring every source whose
stream is intact to its primary's digest; ``swa-es inspect`` must report every bad record with
its offset and exit 1. When a bad record REPLACES a batch, its source must be marked diverged
at the next batch (a seq gap), never guessed and never a crash.
"""

from __future__ import annotations

import contextlib
import io
import random
import tempfile
from pathlib import Path

import anyio
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.events import EventBatch, encode_batch
from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStore, Stats
from log import open_log
from swa_es.cli import main
from tests.consumers.primary_model import PrimaryModel


def _sample_batch() -> EventBatch:
    model = PrimaryModel("worker-0")
    model.start_epoch("e0")
    return model.batch(model.store([1, 2, 3, 4]))


JUNK = st.one_of(
    st.binary(max_size=64),
    st.just(b"{not json"),
    st.just(b"[" * 50_000),
    st.just(b'"just a string"'),
    st.just(b'{"v": 1}'),
    st.just(b'{"v": 2, "source": "worker-0"}'),
    st.text(max_size=30).map(lambda t: orjson.dumps({"type": t})),
    st.integers(1, 200).map(lambda cut: encode_batch(_sample_batch())[:cut]),
    st.just(encode_batch(_sample_batch()).replace(b"BlockStored", b"BlockStoled")),
)


def _streams(rng: random.Random, batches: int) -> tuple[list[PrimaryModel], list[EventBatch]]:
    models = [PrimaryModel(f"worker-{i}") for i in range(2)]
    out = [model.start_epoch() for model in models]
    for _ in range(batches):
        model = rng.choice(models)
        prompt = [rng.randrange(5) for _ in range(2)] + [rng.randrange(100) for _ in range(3)]
        events = model.store(prompt)
        if rng.random() < 0.3:
            events += model.tombstone(model.hashes(prompt)[-1:])
        out.append(model.batch(events, with_digest=rng.random() < 0.3))
    return models, out


async def _replay(directory: Path, snapshots: Path | None) -> tuple[Follower, ReplicaSet]:
    async with await open_log(directory.as_uri(), readonly=True) as log:
        replicas = ReplicaSet()
        views = [replicas, PrefixIndex(replicas), Stats(replicas)]
        store = SnapshotStore(snapshots) if snapshots is not None else None
        follower = Follower(log, views, snapshots=store, snapshot_every_batches=7)
        await follower.restore()
    return follower, replicas


async def _write(directory: Path, records: list[tuple[str, bytes]]) -> None:
    async with await open_log(directory.as_uri(), fsync="never") as log:
        await log.append_batch(records)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), junk=st.lists(JUNK, min_size=1, max_size=6), data=st.data())
def test_bad_payloads_between_good_batches_are_counted_and_skipped(
    seed: int, junk: list[bytes], data: st.DataObject
) -> None:
    """Bad records inserted among good ones: counted as undecodable, reported by inspect at
    their offsets, and every replica still ends equal to its primary (also after a restore)."""
    models, batches = _streams(random.Random(seed), 30)
    records = [(b.source, encode_batch(b)) for b in batches]
    bad_offsets = []
    for payload in junk:
        at = data.draw(st.integers(0, len(records)))
        records.insert(at, ("worker-0", payload))
        bad_offsets = [o + (o >= at) for o in bad_offsets] + [at]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "log"
        anyio.run(_write, directory, records)
        follower, replicas = anyio.run(_replay, directory, Path(tmp) / "snapshots")
        assert follower.metrics.undecodable == len(junk)
        assert follower.metrics.records_read == len(records)
        assert follower.diverged() == {}
        for model in models:
            assert replicas[model.source].state_digest() == model.digest.hexdigest()
        restored, again = anyio.run(_replay, directory, Path(tmp) / "snapshots")
        assert restored.metrics.restored_generation is not None
        assert {s: again[s].state_digest() for s in again.sources()} == {
            m.source: m.digest.hexdigest() for m in models
        }
        out, err = io.StringIO(), io.StringIO()
        status = _inspect(directory, out, err)
        assert status == 1
        reported = [
            int(line.split(" offset ")[1].split(":")[0])
            for line in err.getvalue().splitlines()
            if line.startswith("bad record at")
        ]
        assert reported == sorted(bad_offsets)


def _inspect(directory: Path, out: io.StringIO, err: io.StringIO) -> int:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        return main(["inspect", str(directory)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), junk=JUNK, data=st.data())
def test_a_bad_payload_in_place_of_a_batch_diverges_its_source(
    seed: int, junk: bytes, data: st.DataObject
) -> None:
    """A bad record replacing a batch of worker-0: worker-0 is diverged from its next batch on
    (never guessed), worker-1 stays exact, nothing raises."""
    models, batches = _streams(random.Random(seed), 30)
    replaceable = [i for i, b in enumerate(batches) if b.source == "worker-0" and b.seq > 0]
    victim = data.draw(st.sampled_from(replaceable))
    records = [(b.source, encode_batch(b)) for b in batches]
    records[victim] = ("worker-0", junk)
    later = any(b.source == "worker-0" for b in batches[victim + 1 :])
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "log"
        anyio.run(_write, directory, records)
        follower, replicas = anyio.run(_replay, directory, None)
    assert follower.metrics.undecodable == 1
    assert ("worker-0" in follower.diverged()) == later
    if later:
        assert replicas["worker-0"].state_digest() is None
    assert replicas["worker-1"].state_digest() == models[1].digest.hexdigest()
