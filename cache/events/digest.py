"""The order-independent state digest shared by the primary tree and its replicas.

The digest of a set of blocks is the sum, mod 2**64, of one term per block; a term mixes
``(block_hash, parent_block_hash, swa_resident)``. Adding, removing or changing one block updates
the digest in O(1), and any two holders of the same blocks agree whatever order they got them in.

A block held on a lower tier (a medium other than the GPU: ``"CPU"``, ``"DISK"``, ...) adds a
term of its own, ``tier_term(block_hash, medium)``, salted apart from every GPU term and keyed by
the medium's name (FNV-1a of its UTF-8 bytes), so a block counts once per place it is held.

The term is ``mix64-v1`` (``DIGEST_ALGORITHM``), computed by the native core: two rounds of the
splitmix64 finalizer over the block hash (already a SHA-256 prefix), salted by the flags, then the
parent's hash. Each epoch's ``meta`` names it as ``digest_alg``. ``tests.oracles.digest``
is the pure-Python twin.
"""

from __future__ import annotations

from typing import Final

from cache.events import _native

_MASK: Final = (1 << 64) - 1

DIGEST_ALGORITHM: Final = _native.DIGEST_ALGORITHM
"""The name of the digest function, written in each epoch's ``meta`` as ``digest_alg``."""

block_term: Final = _native.block_term
"""``block_term(block_hash, parent_block_hash, swa_resident) -> int``: one block's term."""

chain_block_terms: Final = _native.chain_block_terms
"""``chain_block_terms(block_hashes, first_parent, swa_resident) -> list[int]``: the terms of
a chain of pages, each page's parent being the previous one (the first's is ``first_parent``)."""


tier_term: Final = _native.tier_term
"""``tier_term(block_hash, medium) -> int``: the term of a block held on the lower tier
``medium`` (``ValueError`` for ``"GPU"``, whose blocks take ``block_term``)."""


def format_digest(value: int) -> str:
    """The printable form of a digest accumulator: 16 lowercase hex digits."""
    return f"{value & _MASK:016x}"


class StateDigest:
    """An incremental digest accumulator: ``add`` / ``remove`` block terms, read ``hexdigest``."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value & _MASK

    def add(self, block_hash: int, parent_block_hash: int | None, swa_resident: bool) -> None:
        """Account for a block that entered the state."""
        self.value = (self.value + block_term(block_hash, parent_block_hash, swa_resident)) & _MASK

    def remove(self, block_hash: int, parent_block_hash: int | None, swa_resident: bool) -> None:
        """Account for a block that left the state."""
        self.value = (self.value - block_term(block_hash, parent_block_hash, swa_resident)) & _MASK

    def set_residency(
        self, block_hash: int, parent_block_hash: int | None, swa_resident: bool
    ) -> None:
        """Account for a block whose SWA residency flipped to ``swa_resident``."""
        self.remove(block_hash, parent_block_hash, not swa_resident)
        self.add(block_hash, parent_block_hash, swa_resident)

    def add_tier(self, block_hash: int, medium: str) -> None:
        """Account for a block that entered the lower tier ``medium`` (not ``"GPU"``)."""
        self.value = (self.value + tier_term(block_hash, medium)) & _MASK

    def remove_tier(self, block_hash: int, medium: str) -> None:
        """Account for a block that left the lower tier ``medium`` (not ``"GPU"``)."""
        self.value = (self.value - tier_term(block_hash, medium)) & _MASK

    def clear(self) -> None:
        """Forget every block."""
        self.value = 0

    def hexdigest(self) -> str:
        """The digest as 16 lowercase hex digits."""
        return format_digest(self.value)
