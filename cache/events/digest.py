"""The order-independent state digest shared by the primary tree and its replicas.

The digest of a set of blocks is the sum, mod 2**64, of one term per block; a term hashes
``(block_hash, parent_block_hash, swa_resident)``. Adding, removing or changing one block updates
the digest in O(1), and any two holders of the same blocks agree whatever order they got them in.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Final

_MASK: Final = (1 << 64) - 1
_TERM_LAYOUT: Final = struct.Struct("<qqB")
_HAS_PARENT: Final = 1
_SWA_RESIDENT: Final = 2


def block_term(block_hash: int, parent_block_hash: int | None, swa_resident: bool) -> int:
    """The digest contribution of one block."""
    flags = (_SWA_RESIDENT if swa_resident else 0) | (
        0 if parent_block_hash is None else _HAS_PARENT
    )
    packed = _TERM_LAYOUT.pack(block_hash, parent_block_hash or 0, flags)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little")


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
