"""KV-cache events: types, the batch codec, block hashing and the state digest.

This package imports nothing of torch or of the tree, so consumers can use it on its own. The
per-event work runs in the native core (``cache.events._native``, private); the pure-Python
twins in ``tests.oracles`` are the readable reference and the test oracle only.
"""

from cache.events import types as _types
from cache.events.codec import (
    DEFAULT_MAX_RECORD_BYTES,
    SUPPORTED_VERSIONS,
    WireBatch,
    batch_to_dict,
    decode_batch,
    decode_event,
    decode_wire,
    encode_batch,
    event_to_dict,
)
from cache.events.digest import (
    DIGEST_ALGORITHM,
    StateDigest,
    block_term,
    chain_block_terms,
    format_digest,
    tier_term,
)
from cache.events.errors import DecodeError
from cache.events.hashing import (
    ROOT_PRIOR,
    block_hashes_of,
    chain_block_hashes,
    chain_page_digests,
    digest_to_block_hash,
    namespace_prior,
    page_digest,
)
from cache.events.meta import BatchMeta
from cache.events.types import *  # noqa: F403 (each event type is exported where it is declared)

__all__ = [
    "BatchMeta",
    "SUPPORTED_VERSIONS",
    "DEFAULT_MAX_RECORD_BYTES",
    "DecodeError",
    "WireBatch",
    "batch_to_dict",
    "decode_batch",
    "decode_event",
    "decode_wire",
    "encode_batch",
    "event_to_dict",
    "DIGEST_ALGORITHM",
    "StateDigest",
    "block_term",
    "chain_block_terms",
    "format_digest",
    "tier_term",
    "ROOT_PRIOR",
    "block_hashes_of",
    "chain_block_hashes",
    "chain_page_digests",
    "digest_to_block_hash",
    "namespace_prior",
    "page_digest",
]
__all__ += _types.__all__
