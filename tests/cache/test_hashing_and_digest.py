"""Block hashes match sglang's test vectors; the state digest is order independent."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.events import (
    StateDigest,
    block_hashes_of,
    chain_page_digests,
    digest_to_block_hash,
    namespace_prior,
    page_digest,
)


def test_single_token_pages_chain_from_the_root() -> None:
    """Pages [1] and [2] chained from the root give sglang's event ids."""
    digests = chain_page_digests(b"", [1, 2], page_size=1)
    assert block_hashes_of(digests) == [7470307888890966271, -1634645291211865391]


def test_four_token_page_at_the_root() -> None:
    """The page [1, 2, 3, 4] at the root hashes to sglang's event id."""
    assert block_hashes_of(chain_page_digests(b"", [1, 2, 3, 4], 4)) == [-3488128144981237669]


def test_chain_equals_page_by_page_hashing() -> None:
    """Chaining in one call equals hashing each page onto the previous digest."""
    tokens = list(range(100, 132))
    prior = b""
    expected = []
    for start in range(0, 32, 4):
        prior = page_digest(prior, tokens[start : start + 4])
        expected.append(prior)
    assert chain_page_digests(b"", tokens, 4) == expected


def test_trailing_partial_page_is_ignored() -> None:
    """Only whole pages are hashed."""
    assert len(chain_page_digests(b"", [1, 2, 3, 4, 5, 6], 4)) == 1


def test_namespace_changes_the_hash() -> None:
    """A named namespace seeds the chain with sha256(extra_key); none keeps sglang's."""
    assert namespace_prior(None) == b""
    assert namespace_prior("lora-a") == hashlib.sha256(b"lora-a").digest()
    plain = chain_page_digests(namespace_prior(None), [1], 1)
    named = chain_page_digests(namespace_prior("lora-a"), [1], 1)
    assert plain != named


@pytest.mark.parametrize("bad", [-1, 1 << 32])
def test_token_outside_uint32_is_rejected(bad: int) -> None:
    """Token ids must fit in 4 unsigned bytes."""
    with pytest.raises(ValueError, match="token id"):
        chain_page_digests(b"", [bad], 1)


def test_event_id_is_signed_big_endian() -> None:
    """The event id is the first 8 digest bytes, big-endian, signed."""
    assert digest_to_block_hash(b"\xff" * 8 + b"\x00" * 24) == -1
    assert digest_to_block_hash(b"\x00" * 7 + b"\x01" + b"\x00" * 24) == 1


BLOCKS = st.lists(
    st.tuples(
        st.integers(-(1 << 63), (1 << 63) - 1), st.none() | st.integers(0, 1 << 40), st.booleans()
    ),
    unique_by=lambda b: b[0],
    max_size=30,
)


@given(BLOCKS, st.randoms())
def test_digest_is_order_independent(blocks: list[tuple[int, int | None, bool]], rng) -> None:  # type: ignore[no-untyped-def]  # hypothesis' Random
    """Adding the same blocks in any order gives the same digest."""
    forward, shuffled = StateDigest(), StateDigest()
    for block in blocks:
        forward.add(*block)
    order = list(blocks)
    rng.shuffle(order)
    for block in order:
        shuffled.add(*block)
    assert forward.hexdigest() == shuffled.hexdigest()


@given(BLOCKS)
def test_remove_undoes_add_and_residency_flips(blocks: list[tuple[int, int | None, bool]]) -> None:
    """Removing every block returns to the empty digest; residency flips are reversible."""
    digest = StateDigest()
    for block in blocks:
        digest.add(*block)
    before = digest.hexdigest()
    for block_hash, parent, resident in blocks:
        digest.set_residency(block_hash, parent, not resident)
    for block_hash, parent, resident in blocks:
        digest.set_residency(block_hash, parent, resident)
    assert digest.hexdigest() == before
    for block in blocks:
        digest.remove(*block)
    assert digest.hexdigest() == StateDigest().hexdigest() == "0000000000000000"
