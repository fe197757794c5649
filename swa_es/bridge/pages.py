"""Our hash of one engine page, and what the bridge remembers of a page by its engine hash.

An engine page is hashed our way (docs/design.md §4) from its prior (the parent's digest, or the
namespace's root prior) and its tokens. A page carrying vLLM extra keys that a token-only query
cannot know (multimodal items, salts, embeddings) is chained with those keys too, so no query
matches it by tokens alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from cache.events import page_digest

__all__ = ["Page", "engine_page_digest"]

_OPAQUE_TAG: Final = b"swa-es/engine-extra-keys\x00"


@dataclass(frozen=True, slots=True)
class Page:
    """One engine page in our terms: our hash, our parent's hash, its tokens, its digest."""

    our_hash: int
    our_parent: int | None
    tokens: tuple[int, ...]
    digest: bytes


def engine_page_digest(prior: bytes, tokens: tuple[int, ...], extra: Any) -> bytes:
    """The digest of a page under ``prior``; ``extra`` (vLLM's extra keys, None when the page
    has none) is mixed in so that such a page never equals a token-only one."""
    digest = page_digest(prior, tokens)
    if extra is None:
        return digest
    packed = msgpack.packb(extra, default=repr, use_bin_type=True)
    return hashlib.sha256(_OPAQUE_TAG + digest + packed).digest()
