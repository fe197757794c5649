"""The ``mix64-v1`` state-digest term: the pure-Python reference of the native core.

A block's term mixes ``(block_hash, parent_block_hash, swa_resident)``: the block hash, xored
with one odd salt per flag combination (has a parent, is SWA-resident), goes through the
splitmix64 finalizer; the result, xored with the parent's hash (0 at a root), goes through it
again. The digest of a state is the sum of its blocks' terms mod 2**64.

A block held on a lower tier ``medium`` (not the GPU) adds ``tier_term``: the block hash, xored
with the tier salt, through the finalizer; the result, xored with the FNV-1a (64-bit) hash of the
medium's UTF-8 bytes, through it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

ALGORITHM: Final = "mix64-v1"

_MASK: Final = (1 << 64) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_HAS_PARENT: Final = 1
_SWA_RESIDENT: Final = 2
_FLAG_SALTS: Final = (
    0x243F_6A88_85A3_08D3,
    0x1319_8A2E_0370_7345,
    0xA409_3822_299F_31D1,
    0x082E_FA98_EC4E_6C89,
)


_TIER_SALT: Final = 0x4528_21E6_38D0_1377
_FNV_OFFSET: Final = 0xCBF2_9CE4_8422_2325
_FNV_PRIME: Final = 0x0000_0100_0000_01B3


def mix64(value: int) -> int:
    """The splitmix64 finalizer: a bijection of 64-bit words with full avalanche."""
    z = value & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK
    return z ^ (z >> 31)


def _int64(value: int, name: str) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise OverflowError(f"{name} {value} is outside int64")
    return value


def block_term(block_hash: int, parent_block_hash: int | None, swa_resident: bool) -> int:
    """The digest contribution of one block."""
    flags = (0 if parent_block_hash is None else _HAS_PARENT) | (
        _SWA_RESIDENT if swa_resident else 0
    )
    first = mix64((_int64(block_hash, "block_hash") & _MASK) ^ _FLAG_SALTS[flags])
    parent = 0 if parent_block_hash is None else _int64(parent_block_hash, "parent_block_hash")
    return mix64(first ^ (parent & _MASK))


def medium_key(medium: str) -> int:
    """FNV-1a (64-bit) of the medium's UTF-8 bytes."""
    key = _FNV_OFFSET
    for byte in medium.encode():
        key = ((key ^ byte) * _FNV_PRIME) & _MASK
    return key


def tier_term(block_hash: int, medium: str) -> int:
    """The digest contribution of a block held on the lower tier ``medium``."""
    if medium == "GPU":
        raise ValueError("medium: a GPU block's term is block_term, got 'GPU'")
    first = mix64((_int64(block_hash, "block_hash") & _MASK) ^ _TIER_SALT)
    return mix64(first ^ medium_key(medium))


def chain_block_terms(
    block_hashes: Iterable[int], first_parent: int | None, swa_resident: bool
) -> list[int]:
    """The terms of a chain of pages: each page's parent is the previous page."""
    terms = []
    parent = first_parent
    for block_hash in block_hashes:
        terms.append(block_term(block_hash, parent, swa_resident))
        parent = block_hash
    return terms


def format_digest(value: int) -> str:
    """The printable form of a digest accumulator: 16 lowercase hex digits."""
    return f"{value & _MASK:016x}"
