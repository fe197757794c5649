"""The snapshot-store contract (tests/consumers/snapshot_contract.py) run against both stores:
the directory store, and the Kafka store on a real broker."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from consumers import DirectorySnapshotStore, SnapshotStorage, open_snapshot_store
from tests.consumers.snapshot_contract import SnapshotStoreContract, StoreFactory
from tests.fixtures.kafka import fresh_topic


class TestDirectorySnapshotStore(SnapshotStoreContract):
    """Snapshot files in one directory."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """Stores on one directory per test."""

        async def factory(**options: Any) -> SnapshotStorage:
            return DirectorySnapshotStore(tmp_path / "snapshots", **options)

        return factory


@pytest.mark.kafka
class TestKafkaSnapshotStore(SnapshotStoreContract):
    """Chunks and manifests on a compacted topic (one fresh topic and group per test)."""

    @pytest.fixture
    async def store_factory(
        self, kafka_bootstrap: str, request: pytest.FixtureRequest
    ) -> AsyncIterator[StoreFactory]:
        """Stores on one fresh topic and group per test; small chunks, so views span many."""
        url = f"kafka://{kafka_bootstrap}/{fresh_topic(request)}"
        group = f"g-{uuid.uuid4().hex[:8]}"
        opened: list[SnapshotStorage] = []
        counter = itertools.count()

        async def factory(**options: Any) -> SnapshotStorage:
            next(counter)
            store = await open_snapshot_store(
                url, group=group, request_timeout_s=10, max_record_bytes=64 * 1024, **options
            )
            opened.append(store)
            return store

        yield factory
        for store in opened:
            await store.close()
