"""The native block hashing equals its pure-Python reference on any input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.events import hashing as native
from tests.oracles import hashing as reference

tokens = st.lists(st.integers(min_value=0, max_value=(1 << 32) - 1), max_size=70)
page_sizes = st.integers(min_value=1, max_value=17)
keys = st.none() | st.text(max_size=12)


@given(tokens, page_sizes, keys)
def test_chain_digests_and_hashes_equal_the_reference(
    token_ids: list[int], page_size: int, extra_key: str | None
) -> None:
    """Chained digests and event ids agree with the reference for every namespace."""
    prior = reference.namespace_prior(extra_key)
    assert native.namespace_prior(extra_key) == prior
    expected = reference.chain_page_digests(prior, token_ids, page_size)
    assert native.chain_page_digests(prior, token_ids, page_size) == expected
    hashes = reference.block_hashes_of(expected)
    assert native.chain_block_hashes(prior, token_ids, page_size) == hashes
    assert native.block_hashes_of(expected) == hashes


@given(st.binary(max_size=40), tokens)
def test_one_page_digest_equals_the_reference(prior: bytes, token_ids: list[int]) -> None:
    """A single page chained onto any prior hashes as the reference does."""
    assert native.page_digest(prior, token_ids) == reference.page_digest(prior, token_ids)


@pytest.mark.parametrize("bad", [-1, 1 << 32])
def test_both_reject_a_token_outside_uint32(bad: int) -> None:
    """Native and reference raise ValueError naming the token id."""
    for module in (native, reference):
        with pytest.raises(ValueError, match="token id"):
            module.chain_page_digests(b"", [1, bad], 1)


def test_both_reject_a_non_positive_page_size() -> None:
    """A page size of 0 is refused by both."""
    for module in (native, reference):
        with pytest.raises(ValueError, match="page_size"):
            module.chain_page_digests(b"", [1], 0)


def test_a_digest_of_the_wrong_length_is_refused() -> None:
    """The native event-id conversion checks the digest's length."""
    with pytest.raises(ValueError, match="32 bytes"):
        native.digest_to_block_hash(b"\x00" * 7)
