"""sglang-compatible chained block hashes, computed by the native core.

For each page, ``digest = sha256(prior_digest || tokens as uint32 little-endian)``, where
``prior_digest`` is the parent page's 32-byte digest (absent at the root of the default namespace,
``sha256(extra_key)`` at the root of a named one). A block's event id is the first 8 digest bytes
read big-endian as a signed int64. ``tests.oracles.hashing`` is the pure-Python twin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from cache.events import _native

ROOT_PRIOR: Final = b""


def namespace_prior(extra_key: str | None) -> bytes:
    """The prior digest of pages at the root of namespace ``extra_key`` (``b""`` for none)."""
    return _native.namespace_prior(extra_key)


def page_digest(prior: bytes, token_ids: Sequence[int]) -> bytes:
    """The 32-byte SHA-256 digest of one page chained onto ``prior``."""
    return _native.page_digest(prior, token_ids)


def digest_to_block_hash(digest: bytes) -> int:
    """The signed int64 event id of a page digest (first 8 bytes, big-endian)."""
    return _native.digest_to_block_hash(digest)


def chain_page_digests(prior: bytes, token_ids: Sequence[int], page_size: int) -> list[bytes]:
    """Digests of every whole page of ``token_ids``, chained from ``prior``.

    A trailing partial page is ignored, as the tree ignores it. ``ValueError`` for a
    non-positive ``page_size`` or a token id outside ``[0, 2**32)``.
    """
    return _native.chain_page_digests(prior, token_ids, page_size)


def chain_block_hashes(prior: bytes, token_ids: Sequence[int], page_size: int) -> list[int]:
    """Event ids of every whole page of ``token_ids``, chained from ``prior`` (no digests kept)."""
    return _native.chain_block_hashes(prior, token_ids, page_size)


def block_hashes_of(digests: Iterable[bytes]) -> list[int]:
    """Event ids of a sequence of page digests."""
    return [_native.digest_to_block_hash(digest) for digest in digests]
