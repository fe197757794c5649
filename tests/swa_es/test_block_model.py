"""``swa_es.testing.BlockModel``: the blocks a stream of events describes, strictly."""

from __future__ import annotations

import pytest

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
)
from swa_es.testing import BlockModel, BlockModelError


def _chain() -> BlockModel:
    model = BlockModel()
    model.apply_all([BlockStored((1, 2, 3), None, (10, 11, 20, 21, 30, 31), 2)])
    return model


def test_a_chain_store_holds_each_page_under_the_previous_one() -> None:
    """A multi-page BlockStored (the wire form) stores one block per page, chained."""
    model = _chain()
    assert model.residency() == {1: (None, True), 2: (1, True), 3: (2, True)}
    assert model.blocks[2].tokens == (20, 21)


def test_snapshot_events_rebuild_the_same_digest() -> None:
    """AllBlocksCleared + snapshot_events() applied to a fresh model gives the same digest."""
    model = _chain()
    model.apply(BlockSWAEvicted((2,)))
    copy = BlockModel()
    copy.apply_all([AllBlocksCleared(), *model.snapshot_events(block_size=2)])
    assert copy.hexdigest() == model.hexdigest() and copy.residency() == model.residency()


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (BlockStored((2,), 1, (0, 0), 2), "stored twice"),
        (BlockStored((9,), 8, (0, 0), 2), "unknown parent 8"),
        (BlockRemoved((9,)), "block 9 removed but not held"),
        (BlockSWARestored((1,)), "already True"),
    ],
)
def test_an_impossible_event_names_the_block(event: Event, message: str) -> None:
    """Stores of held blocks, unknown parents or blocks, and repeated residency are refused."""
    with pytest.raises(BlockModelError, match=message):
        _chain().apply(event)


def test_repeated_residency_can_be_allowed() -> None:
    """strict_residency=False accepts a repeated eviction, as a replica does."""
    model = BlockModel(strict_residency=False)
    model.apply_all(
        [BlockStored((1,), None, (5,), 1), BlockSWAEvicted((1,)), BlockSWAEvicted((1,))]
    )
    assert model.residency() == {1: (None, False)}
