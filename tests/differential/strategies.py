"""Hypothesis strategies for differential sequences: configs and the steps run on them.

Shapes that make the caches work hard:

* tokens come from a tiny alphabet (2 to 4 ids) and every request reuses a cut of one of a few
  base prompts, so requests share long prefixes and diverge inside nodes and pages (splits);
* the window is below, at or above the page size, aligned or not;
* both pools hold only one to three of the longest requests, so allocation evicts all the time
  and held requests' locks make some evictions fall short.

Every sequence is valid input for both caches and stays clear of the intended differences
listed in ``intended.py`` (no ``extra_key``; locks released before a reset).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from tests.differential.steps import CacheConfig, Evict, Finish, Request, Reset, Scratch, Step

BASE_PROMPTS = 4
"""Base prompts per sequence; every request starts with a cut of one of them."""
MAX_BASE_PAGES = 6
"""The longest base prompt, in pages."""
MAX_TAIL_PAGES = 2
"""A request's own tail after its cut: up to this many pages plus one token."""


def max_request_pages(page_size: int) -> int:
    """Pages the longest request can need."""
    longest = (MAX_BASE_PAGES + MAX_TAIL_PAGES) * page_size + 1
    return -(-longest // page_size)


@st.composite
def configs(draw: st.DrawFn, page_size: int) -> CacheConfig:
    """Pools of one to three longest requests; a window below, at or above the page."""
    window = draw(
        st.one_of(
            st.just(page_size),
            st.integers(1, max(1, page_size - 1)),
            st.integers(page_size + 1, 4 * page_size + 2),
        )
    )
    longest = max_request_pages(page_size)
    full_pages = draw(st.integers(longest, 3 * longest))
    # SWA is usually the scarcer pool (as in serving), so tombstones come and go all the time.
    swa_pages = draw(
        st.integers(longest, max(longest, full_pages // 2)) | st.integers(longest, full_pages)
    )
    return CacheConfig(page_size, window, full_pages * page_size, swa_pages * page_size)


def _expand(seed: int, length: int, alphabet: int) -> tuple[int, ...]:
    """``length`` tokens below ``alphabet``, determined by ``seed``."""
    rng = random.Random(seed)
    return tuple(rng.randrange(alphabet) for _ in range(length))


@st.composite
def sequences(draw: st.DrawFn, page_size: int, min_steps: int, max_steps: int) -> list[Step]:
    """A list of steps: mostly requests (some held), finishes, evictions, scratch allocations
    and the occasional reset."""
    alphabet = draw(st.integers(2, 4))
    base_len = MAX_BASE_PAGES * page_size
    bases = [
        _expand(draw(st.integers(0, 2**16)), draw(st.integers(1, base_len)), alphabet)
        for _ in range(BASE_PROMPTS)
    ]
    max_tail = MAX_TAIL_PAGES * page_size + 1
    pool_pages = 3 * max_request_pages(page_size)

    @st.composite
    def request(draw: st.DrawFn, hold: bool) -> Step:
        base = bases[draw(st.integers(0, BASE_PROMPTS - 1))]
        tokens = base[: draw(st.integers(0, base_len))]
        tokens += _expand(draw(st.integers(0, 2**16)), draw(st.integers(0, max_tail)), alphabet)
        # Half the requests match all they insert; the others only a prompt, so the insert
        # walks on past the match (splitting, restoring tombstones) as an engine's does.
        whole = draw(st.booleans())
        prompt = len(tokens) if whole else draw(st.integers(0, len(tokens)))
        return Request(tokens, prompt, hold)

    evict = st.builds(
        Evict,
        st.integers(0, pool_pages * page_size // 2),
        st.integers(0, pool_pages * page_size // 2),
    )
    scratch = st.builds(
        Scratch,
        st.integers(1, 3),
        st.integers(0, 3 * page_size),
        st.integers(0, 3 * page_size),
    )
    # One draw picks the kind, so the mix is fixed: 60% requests, 10% held ones, ...
    kinds: list[tuple[int, st.SearchStrategy[Step]]] = [
        (60, request(hold=False)),
        (10, request(hold=True)),
        (10, st.builds(Finish, st.integers(0, 7))),
        (12, evict),
        (2, st.just(Reset())),
        (6, scratch),
    ]
    table = [strategy for weight, strategy in kinds for _ in range(weight)]
    step = st.integers(0, len(table) - 1).flatmap(table.__getitem__)
    return draw(st.lists(step, min_size=min_steps, max_size=max_steps))
