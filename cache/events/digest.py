"""The order-independent state digest shared by the primary tree and its replicas.

The digest of a set of blocks is the sum, mod 2**64, of one term per block; a term mixes
``(block_hash, parent_block_hash, swa_resident)`` (``mix64-v1``: the block hash already is a
SHA-256 prefix, so two splitmix64 rounds suffice). Adding, removing or changing one block updates
the digest in O(1), and any two holders of the same blocks agree whatever order they got them in.
"""

from __future__ import annotations

from typing import Final

ALGORITHM: Final = "mix64-v1"
_MASK: Final = (1 << 64) - 1
_HAS_PARENT: Final = 1
_SWA_RESIDENT: Final = 2
# One odd constant per flag combination, so the flags change every bit of the term.
_FLAG_SALTS: Final = (
    0x243F6A8885A308D3,
    0x13198A2E03707345,
    0xA4093822299F31D1,
    0x082EFA98EC4E6C89,
)


def _mix64(value: int) -> int:
    """The splitmix64 finalizer (a bijection of 64-bit ints with full avalanche)."""
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def block_term(block_hash: int, parent_block_hash: int | None, swa_resident: bool) -> int:
    """The digest contribution of one block (``mix64-v1``, the native core's ``block_term``)."""
    flags = (_SWA_RESIDENT if swa_resident else 0) | (
        0 if parent_block_hash is None else _HAS_PARENT
    )
    first = _mix64((block_hash & _MASK) ^ _FLAG_SALTS[flags])
    return _mix64(first ^ ((parent_block_hash or 0) & _MASK))


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

    def clear(self) -> None:
        """Forget every block."""
        self.value = 0

    def hexdigest(self) -> str:
        """The digest as 16 lowercase hex digits."""
        return format_digest(self.value)
