"""KV-cache events: types, the batch codec, block hashing and the state digest.

This package imports nothing of torch or of the tree, so consumers can use it on its own. The
per-event work runs in the native core (``cache.events._native``, private); the pure-Python
twins in ``tests.oracles`` are the readable reference and the test oracle only.
"""

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
from cache.events.types import (
    BATCH_VERSION,
    MEDIUM_GPU,
    REMOVAL_REASONS,
    REMOVED_DEMOTED,
    REMOVED_EVICTED,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
)

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "BlockSWAEvicted",
    "BlockSWARestored",
    "Event",
    "EventBatch",
    "BatchMeta",
    "BATCH_VERSION",
    "SUPPORTED_VERSIONS",
    "MEDIUM_GPU",
    "REMOVAL_REASONS",
    "REMOVED_DEMOTED",
    "REMOVED_EVICTED",
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
