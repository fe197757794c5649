"""KV-cache events: types, the batch codec, block hashing and the state digest.

This package imports nothing of torch or of the tree, so consumers can use it on its own.
"""

from cache.events.codec import (
    DEFAULT_MAX_RECORD_BYTES,
    DecodeError,
    batch_to_dict,
    decode_batch,
    decode_event,
    encode_batch,
    event_to_dict,
)
from cache.events.digest import ALGORITHM as DIGEST_ALGORITHM
from cache.events.digest import StateDigest, block_term, format_digest
from cache.events.hashing import (
    ROOT_PRIOR,
    block_hashes_of,
    chain_block_hashes,
    chain_page_digests,
    digest_to_block_hash,
    namespace_prior,
    page_digest,
)
from cache.events.types import (
    BATCH_VERSION,
    MEDIUM_GPU,
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
    "BATCH_VERSION",
    "MEDIUM_GPU",
    "DEFAULT_MAX_RECORD_BYTES",
    "DecodeError",
    "batch_to_dict",
    "decode_batch",
    "decode_event",
    "encode_batch",
    "event_to_dict",
    "DIGEST_ALGORITHM",
    "StateDigest",
    "block_term",
    "format_digest",
    "ROOT_PRIOR",
    "block_hashes_of",
    "chain_block_hashes",
    "chain_page_digests",
    "digest_to_block_hash",
    "namespace_prior",
    "page_digest",
]
