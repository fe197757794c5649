"""The native ``mix64-v1`` digest term equals its pure-Python reference on any block."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.events import digest as native
from tests.oracles import digest as reference

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@given(INT64, st.none() | INT64, st.booleans())
def test_block_term_equals_the_reference(
    block_hash: int, parent: int | None, swa_resident: bool
) -> None:
    """One block's term is the same from both."""
    assert native.block_term(block_hash, parent, swa_resident) == reference.block_term(
        block_hash, parent, swa_resident
    )


@given(st.lists(INT64, max_size=20), st.none() | INT64, st.booleans())
def test_chain_terms_equal_the_reference(
    hashes: list[int], first_parent: int | None, swa_resident: bool
) -> None:
    """A chain's terms (each page's parent the previous page) are the same from both."""
    expected = reference.chain_block_terms(hashes, first_parent, swa_resident)
    assert native.chain_block_terms(hashes, first_parent, swa_resident) == expected
    parents = [first_parent, *hashes][: len(hashes)]
    assert expected == [
        reference.block_term(h, p, swa_resident) for h, p in zip(hashes, parents, strict=True)
    ]


def test_pinned_values_name_the_algorithm() -> None:
    """The values the Rust tests pin: a change of the function needs a new algorithm name."""
    assert native.DIGEST_ALGORITHM == reference.ALGORITHM == "mix64-v1"
    pinned = [
        ((1, None, True), "55bd85356cfb3a2a"),
        ((7470307888890966271, None, True), "808cc83dd9c9adce"),
        ((-1634645291211865391, 7470307888890966271, False), "f194774adc4c0d2b"),
    ]
    for args, hexdigest in pinned:
        assert native.format_digest(native.block_term(*args)) == hexdigest
        assert reference.format_digest(reference.block_term(*args)) == hexdigest


@pytest.mark.parametrize("bad", [1 << 63, -(1 << 63) - 1])
def test_both_refuse_a_hash_outside_int64(bad: int) -> None:
    """A block hash outside int64 is an OverflowError from both."""
    for module in (native, reference):
        with pytest.raises(OverflowError):
            module.block_term(bad, None, True)
        with pytest.raises(OverflowError):
            module.block_term(1, bad, True)
