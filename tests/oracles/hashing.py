"""sglang-compatible chained block hashes: the pure-Python reference of the native core.

For each page, ``digest = sha256(prior_digest || tokens as uint32 little-endian)``, where
``prior_digest`` is the parent page's 32-byte digest (absent at the root of the default namespace,
``sha256(extra_key)`` at the root of a named one). The event id is the first 8 digest bytes read
big-endian as a signed int64.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Sequence
from sys import byteorder
from typing import Final

ROOT_PRIOR: Final = b""


def namespace_prior(extra_key: str | None) -> bytes:
    """The prior digest of pages at the root of namespace ``extra_key`` (``b""`` for none)."""
    if extra_key is None:
        return ROOT_PRIOR
    return hashlib.sha256(extra_key.encode("utf-8")).digest()


def _tokens_le_bytes(token_ids: Sequence[int]) -> bytes:
    try:
        packed = array("I", token_ids)
    except OverflowError as exc:
        raise ValueError(f"token id outside [0, 2**32) in page {list(token_ids)!r}") from exc
    if packed.itemsize != 4:  # pragma: no cover - every platform we build on has 4-byte "I"
        raise RuntimeError("array('I') is not 4 bytes wide on this platform")
    if byteorder != "little":  # pragma: no cover - big-endian hosts only
        packed.byteswap()
    return packed.tobytes()


def page_digest(prior: bytes, token_ids: Sequence[int]) -> bytes:
    """The 32-byte SHA-256 digest of one page chained onto ``prior``."""
    hasher = hashlib.sha256(prior)
    hasher.update(_tokens_le_bytes(token_ids))
    return hasher.digest()


def digest_to_block_hash(digest: bytes) -> int:
    """The signed int64 event id of a page digest (first 8 bytes, big-endian)."""
    return int.from_bytes(digest[:8], "big", signed=True)


def chain_page_digests(prior: bytes, token_ids: Sequence[int], page_size: int) -> list[bytes]:
    """Digests of every whole page of ``token_ids``, chained from ``prior``.

    A trailing partial page is ignored, as the tree ignores it.
    """
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    if page_size == 1:
        try:
            return _chain_single_token_pages(prior, token_ids)
        except AttributeError:  # ids that are not Python ints (numpy, ...) take the path below
            pass
    whole = len(token_ids) - len(token_ids) % page_size
    if whole == 0:
        return []
    raw = _tokens_le_bytes(token_ids[:whole])
    step = page_size * 4
    digests: list[bytes] = []
    sha256 = hashlib.sha256
    for start in range(0, len(raw), step):
        prior = sha256(prior + raw[start : start + step]).digest()
        digests.append(prior)
    return digests


def _chain_single_token_pages(prior: bytes, token_ids: Sequence[int]) -> list[bytes]:
    # Page size 1 is the hot case (one digest per token); packing each token on its own is
    # about a quarter faster than packing the whole key once and slicing it.
    digests: list[bytes] = []
    append = digests.append
    sha256 = hashlib.sha256
    try:
        for token in token_ids:
            prior = sha256(prior + token.to_bytes(4, "little")).digest()
            append(prior)
    except OverflowError:
        raise ValueError(f"token id outside [0, 2**32) in {list(token_ids)!r}") from None
    return digests


def block_hashes_of(digests: Iterable[bytes]) -> list[int]:
    """Event ids of a sequence of page digests."""
    return [int.from_bytes(d[:8], "big", signed=True) for d in digests]
