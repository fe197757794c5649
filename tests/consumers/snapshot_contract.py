"""The contract every snapshot store keeps (``consumers.SnapshotStorage``), run against each.

A subclass provides the ``store_factory`` fixture: ``await factory()`` opens a store on one
fresh place per test (a directory, or a topic and group); every call of one test opens another
instance on the *same* place, as a second follower (or a restarted one) would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from consumers import SnapshotStorage
from log import Position

StoreFactory = Callable[..., Awaitable[SnapshotStorage]]


class SnapshotStoreContract:
    """Behaviour shared by every snapshot store."""

    async def test_round_trips_views_cursors_position_and_digests(
        self, store_factory: StoreFactory
    ) -> None:
        """What write() stored, newest_valid() gives back byte for byte."""
        store = await store_factory()
        position = Position.of({0: 12, 3: 4})
        cursors: dict[str, Any] = {"w": {"epoch": "e", "seq": 3}}
        digests: dict[str, str | None] = {"w": "abc", "x": None}
        views = {"a": b"\x00\x01" * 1000, "b": b""}
        info = await store.write(position, cursors, views, digests)
        assert info.position == position
        assert info.digests == digests
        assert info.generation >= 1
        found = await store.newest_valid(["a", "b"])
        assert found is not None
        assert found.info == info
        assert found.views == views
        assert found.cursors == cursors

    async def test_an_empty_store_has_nothing(self, store_factory: StoreFactory) -> None:
        """No snapshot yet: None, no infos, no position to keep."""
        store = await store_factory()
        assert await store.newest_valid() is None
        assert await store.infos() == []
        assert await store.oldest_kept_position() is None

    async def test_keeps_only_the_newest_k(self, store_factory: StoreFactory) -> None:
        """After five writes with keep=2 the two newest remain, oldest first."""
        store = await store_factory(keep=2)
        for offset in range(5):
            await store.write(Position.of({0: offset}), {}, {"v": bytes([offset])})
        infos = await store.infos()
        assert [i.position for i in infos] == [Position.of({0: 3}), Position.of({0: 4})]
        assert [i.generation for i in infos] == sorted(i.generation for i in infos)
        assert await store.oldest_kept_position() == Position.of({0: 3})

    async def test_newest_valid_skips_a_snapshot_lacking_a_view(
        self, store_factory: StoreFactory
    ) -> None:
        """A snapshot without a required view is passed over for the older one."""
        store = await store_factory(keep=5)
        await store.write(Position.of({0: 1}), {}, {"a": b"1", "b": b"1"})
        await store.write(Position.of({0: 2}), {}, {"a": b"2"})
        found = await store.newest_valid(["a", "b"])
        assert found is not None
        assert found.views == {"a": b"1", "b": b"1"}
        newest = await store.newest_valid(["a"])
        assert newest is not None
        assert newest.views == {"a": b"2"}

    async def test_older_than_steps_back_a_generation(self, store_factory: StoreFactory) -> None:
        """older_than=G gives the newest snapshot below generation G."""
        store = await store_factory(keep=5)
        first = await store.write(Position.of({0: 1}), {}, {"v": b"1"})
        second = await store.write(Position.of({0: 2}), {}, {"v": b"2"})
        found = await store.newest_valid(["v"], older_than=second.generation)
        assert found is not None
        assert found.info.generation == first.generation
        assert await store.newest_valid(["v"], older_than=first.generation) is None

    async def test_another_instance_on_the_same_place_reads_and_continues(
        self, store_factory: StoreFactory
    ) -> None:
        """A second store (a restarted or a second follower) sees what the first wrote and
        writes a newer generation after it."""
        first = await store_factory()
        written = await first.write(Position.of({0: 7}), {"w": 1}, {"v": b"first"})
        second = await store_factory()
        found = await second.newest_valid(["v"])
        assert found is not None
        assert found.info == written
        later = await second.write(Position.of({0: 9}), {"w": 2}, {"v": b"second"})
        assert later.generation > written.generation
        newest = await first.newest_valid(["v"])
        assert newest is not None
        assert newest.views == {"v": b"second"}

    async def test_large_views_survive(self, store_factory: StoreFactory) -> None:
        """Views of a few MiB (many chunks on Kafka) round-trip."""
        store = await store_factory()
        big = bytes(range(256)) * (3 * 4096 + 17)
        await store.write(Position.of({0: 1}), {}, {"big": big, "small": b"s"})
        found = await store.newest_valid(["big", "small"])
        assert found is not None
        assert found.views["big"] == big

    async def test_concurrent_writes_of_two_instances_all_load(
        self, store_factory: StoreFactory
    ) -> None:
        """Two instances writing at once (two followers of one group) corrupt nothing: every
        snapshot kept loads, and the newest is one of the last written."""
        first, second = await store_factory(keep=10), await store_factory(keep=10)

        async def write_many(store: SnapshotStorage, tag: bytes) -> None:
            for step in range(3):
                await store.write(Position.of({0: step}), {}, {"v": tag * (step + 1)})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(write_many, first, b"A")
            tasks.start_soon(write_many, second, b"B")
        infos = await first.infos()
        assert infos
        for info in infos:
            snapshot = await first.newest_valid(["v"], older_than=info.generation + 1)
            assert snapshot is not None
            assert snapshot.views["v"] in {b"A", b"AA", b"AAA", b"B", b"BB", b"BBB"}
        newest = await second.newest_valid(["v"])
        assert newest is not None
        assert newest.views["v"] in (b"AAA", b"BBB")
