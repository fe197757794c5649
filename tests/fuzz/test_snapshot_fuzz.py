"""Fuzzing snapshot files: damaged or crafted snapshots are refused with ``SnapshotError`` (or a
view's ``ViewStateError``) and skipped; a restore never raises and ends on the right digests.

Damaged bytes (truncation, flips, overwrites, appended bytes) must fail the checksum before
anything is parsed. Crafted files carry valid checksums around a fuzzed manifest or fuzzed view
bytes, so they reach the parsers: those must refuse cleanly too, in bounded memory. The corpus
in ``tests/data/fuzz/snapshots`` is replayed on every run; each of its files must be refused.
"""

from __future__ import annotations

import contextlib
import resource
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumers import SnapshotError
from consumers.snapshots.format import read_info, read_snapshot
from tests.fuzz.corpus import corpus_files
from tests.fuzz.json_values import json_values
from tests.fuzz.snapshots import (
    PLANTED_GENERATION,
    REPLICA_HEADER_FIELDS,
    base_case,
    decode_snapshot,
    encode_snapshot,
    planted_name,
    restore_from,
    set_replica_u32,
    with_inner_checksum,
)

JSON_VALUES = json_values(integer_bound=2**40, key_size=5, infinities=True)
DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("overwrite"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=32)),
)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _damage(data: bytes, steps: list[tuple[Any, ...]]) -> bytes:
    out = bytearray(data)
    for kind, *args in steps:
        if kind == "truncate":
            del out[args[0] % (len(out) + 1) :]
        elif kind == "flip" and out:
            out[args[0] % len(out)] ^= 1 << args[1]
        elif kind == "overwrite" and out:
            pos = args[0] % len(out)
            out[pos : pos + len(args[1])] = args[1][: len(out) - pos]
        elif kind == "append":
            out += args[0]
    return bytes(out)


def _readable(path: Path) -> bool:
    """Whether ``read_snapshot`` accepts the file; any refusal must be a ``SnapshotError``
    naming the file (``read_info`` too)."""
    try:
        read_snapshot(path)
    except SnapshotError as error:
        assert str(path) in str(error)
        with contextlib.suppress(SnapshotError):
            read_info(path)
        return False
    return True


def _plant_and_restore(planted: bytes, *, original: bytes | None) -> None:
    """Plant ``planted`` as the newest snapshot and restore. With ``original`` (damage tests)
    a changed file must be refused; a refused file must be skipped and the restore must end on
    the primaries' digests."""
    case = base_case()
    with tempfile.TemporaryDirectory() as tmp:
        log_dir, snap_dir = case.lay_out(Path(tmp))
        path = snap_dir / planted_name()
        path.write_bytes(planted)
        readable = _readable(path)
        if original is not None:
            assert readable == (planted == original), "a changed snapshot file was accepted"
        size = len(planted) + sum(len(d) for d in case.log_files.values())
        max_rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        tracemalloc.start()
        try:
            restored = anyio.run(restore_from, log_dir, snap_dir)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        max_rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - max_rss_before
    assert peak < 16 * size + 16 * 1024 * 1024, f"restore allocated {peak} bytes (Python)"
    assert max_rss_growth < 256 * 1024 * 1024, f"restore grew the peak RSS by {max_rss_growth}"
    if restored.generation == PLANTED_GENERATION:
        assert readable
        if original is None:
            return  # crafted yet consistent enough to load: nothing to compare it with
    assert restored.diverged == {}
    assert restored.digests == case.digests


@SETTINGS
@given(steps=st.lists(DAMAGE, min_size=1, max_size=3))
def test_damaged_snapshot_bytes_are_skipped(steps: list[tuple[Any, ...]]) -> None:
    """Random damage to the newest snapshot: refused by its checksum (or harmless), and the
    restore falls back to an older snapshot with the right digests."""
    manifest, views = decode_snapshot(base_case().newest_snapshot)
    original = encode_snapshot({**manifest, "generation": PLANTED_GENERATION}, views)
    _plant_and_restore(_damage(original, steps), original=original)


@st.composite
def crafted_manifests(draw: st.DrawFn) -> tuple[Any, list[bytes]]:
    """A real manifest with one field replaced, or a view's bytes damaged, checksums valid."""
    manifest, views = decode_snapshot(base_case().newest_snapshot)
    manifest["generation"] = PLANTED_GENERATION  # as its file name says, or it is refused early
    target = draw(
        st.sampled_from(
            [
                "manifest",
                "field",
                "views",
                "view_sizes",
                "view_bytes",
                "cursors",
                "replica_field",
                "replica_bytes",
            ]
        )
    )
    if target == "manifest":
        return draw(JSON_VALUES), views
    if target == "field":
        key = draw(st.sampled_from(sorted(manifest)))
        manifest[key] = draw(JSON_VALUES)
    elif target == "views":
        manifest["views"] = draw(JSON_VALUES)
    elif target == "view_sizes":
        index = draw(st.integers(0, len(views) - 1))
        manifest["views"][index][1] = draw(st.integers(-5, 2**40))
    elif target == "cursors":
        source = draw(st.sampled_from(sorted(manifest["cursors"])))
        field = draw(st.sampled_from(["epoch", "seq", "diverged", "retired"]))
        manifest["cursors"][source][field] = draw(JSON_VALUES)
    elif target in ("replica_field", "replica_bytes"):
        # behind the replicas view's own checksum too, so the native parser sees the damage
        index = [name for name, _ in manifest["views"]].index("replicas")
        view = views[index]
        if target == "replica_field":
            field = draw(st.sampled_from(["count", *REPLICA_HEADER_FIELDS]))
            value = draw(st.sampled_from([0, 1, 2, 255, 2**16, 2**31 - 1, 2**32 - 1]))
            views[index] = set_replica_u32(view, field, value)
        else:
            body = bytearray(view[:-4])
            pos = draw(st.integers(12, len(body) - 1))
            patch = draw(st.binary(min_size=1, max_size=8))
            body[pos : pos + len(patch)] = patch[: len(body) - pos]
            views[index] = with_inner_checksum(bytes(body))
        manifest["views"][index][1] = len(views[index])
    else:
        index = draw(st.integers(0, len(views) - 1))
        view = views[index]
        views[index] = _damage(view, draw(st.lists(DAMAGE, min_size=1, max_size=2)))
        manifest["views"][index][1] = len(views[index])
    return manifest, views


@SETTINGS
@given(crafted=crafted_manifests())
def test_crafted_snapshots_with_valid_checksums_never_crash_a_restore(
    crafted: tuple[Any, list[bytes]],
) -> None:
    """A manifest or view fuzzed behind valid checksums: the snapshot is refused with a typed
    error and skipped (or loads, if it is consistent), in bounded memory; never another error."""
    manifest, views = crafted
    _plant_and_restore(encode_snapshot(manifest, views), original=None)


@pytest.mark.parametrize("path", corpus_files("snapshots"), ids=lambda p: p.stem)
def test_snapshot_corpus(path: Path) -> None:
    """Every corpus snapshot is refused and the restore ends on the right digests."""
    case = base_case()
    with tempfile.TemporaryDirectory() as tmp:
        log_dir, snap_dir = case.lay_out(Path(tmp))
        planted = snap_dir / planted_name()
        planted.write_bytes(path.read_bytes())
        _readable(planted)
        restored = anyio.run(restore_from, log_dir, snap_dir)
    assert restored.generation is not None and restored.generation != PLANTED_GENERATION
    assert restored.digests == case.digests and restored.diverged == {}
