"""The SWA residency extension of sglang's KV-event stream: the one definition of its shape.

sglang's own events describe full KV only (``BlockStored``, ``BlockRemoved``,
``AllBlocksCleared``); with ``swa_es.integrations.sglang.install()`` its cache also records

- ``BlockSWAEvicted``: the SWA KV of these blocks was freed, their full KV kept (tombstoned);
- ``BlockSWARestored``: these tombstoned blocks hold SWA KV again,

each with ``block_hashes`` (sglang's own int64 page hashes, as its ``BlockStored`` carries them),
``medium`` (``"GPU"``) and ``sliding_window_size`` (the window, in tokens, that sglang's own
``match_prefix`` applies). In sglang 0.5.16's tagged-array form (``array_like``):
``["BlockSWAEvicted", [h, ...], "GPU", 128]``; in the tagged-map form of later releases:
``{"type": "BlockSWAEvicted", "block_hashes": [...], "medium": "GPU",
"sliding_window_size": 128}``.

Right after every ``AllBlocksCleared`` (a cache's start and each ``reset()``) the integration
sends a ``BlockSWARestored`` with no block hashes: it declares the window and that this stream
reports SWA residency, before any block is stored.

A batch never mixes these with sglang's own events: the publisher sends each run of them as a
batch of its own, in order, so a consumer that rejects a batch with an unknown tag (sglang's own
typed decoder, Dynamo's) loses only batches it could not use anyway. docs/sglang.md says which
consumers read a stream with the extension on.

This module imports nothing: the bridge's decoder (``swa_es.bridge.formats``) and the
integration inside sglang both read these names from here.
"""

from __future__ import annotations

from typing import Final

SWA_EVICTED: Final = "BlockSWAEvicted"
"""Tag of the event: the SWA KV of ``block_hashes`` was freed, their full KV kept."""
SWA_RESTORED: Final = "BlockSWARestored"
"""Tag of the event: the tombstoned ``block_hashes`` hold SWA KV again."""
SWA_EVENT_TAGS: Final = frozenset({SWA_EVICTED, SWA_RESTORED})
SWA_EVENT_FIELDS: Final = ("block_hashes", "medium", "sliding_window_size")
"""The fields of both events, in their tagged-array order (after the tag)."""
