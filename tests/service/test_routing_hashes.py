"""Matching by block hashes equals matching by tokens (the native walk) on random replicas:
random prompts stored, tombstoned, revived and removed by several sources, matched by random
prompts that share prefixes with them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.events import EventBatch
from consumers import Follower
from log import MemoryLog
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews
from tests.consumers.primary_model import PrimaryModel

PAGE = 2
BASE = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]


@st.composite
def prompts(draw: st.DrawFn) -> list[int]:
    """A prompt sharing a random prefix with BASE, then random tokens."""
    shared = draw(st.integers(0, len(BASE)))
    return BASE[:shared] + draw(st.lists(st.integers(0, 3), max_size=8))


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[EventBatch], list[list[int]]]:
    """The batches of sources with random histories, and the prompts to match."""
    batches = []
    for index in range(draw(st.integers(1, 4))):
        model = PrimaryModel(
            f"w{index}", page_size=PAGE, sliding_window_size=draw(st.integers(1, 6))
        )
        batches.append(model.start_epoch())
        for _ in range(draw(st.integers(1, 4))):
            tokens = draw(prompts())
            extra_key = draw(st.sampled_from([None, "tenant"]))
            batches.append(model.batch(model.store(tokens, extra_key)))
            hashes = [h for h in model.hashes(tokens, extra_key) if h in model.blocks]
            if hashes and draw(st.booleans()):
                picked = draw(st.lists(st.sampled_from(hashes), max_size=3, unique=True))
                batches.append(model.batch(model.tombstone(picked)))
                if picked and draw(st.booleans()):
                    batches.append(model.batch(model.revive(picked[:1])))
    return batches, draw(st.lists(prompts(), min_size=1, max_size=5))


@settings(max_examples=150, deadline=None)
@given(fleet=fleets())
def test_hashes_match_as_tokens(fleet: tuple[list[EventBatch], list[list[int]]]) -> None:
    """``match_hashes`` (the native walk over the hashes as given) gives the native token walk's
    answers, with and without a namespace."""
    batches, queries = fleet
    views = StandardViews.create()
    for batch in batches:
        views.replicas.apply(batch)
    routing = FollowerRouting(Follower(MemoryLog(), views.all), views)
    hasher = PrimaryModel("hasher", page_size=PAGE)
    for tokens in queries:
        for extra_key in (None, "tenant"):
            by_tokens = routing.match(tokens, extra_key)
            hashes = hasher.hashes(tokens, extra_key)
            assert routing.match_hashes(hashes, PAGE) == by_tokens, (tokens, extra_key)
