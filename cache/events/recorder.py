"""The native event recorder of one tree: the typed face of ``cache.events._native``'s.

The tree records each change as a small op (node stored under a parent with its tokens, removed,
tombstoned, restored, split; everything cleared): no hash and no Python object per page on the
serving loop. The core applies the ops in order to a node table that hashes pages, keeps the
state digest (``DIGEST_ALGORITHM``) and makes the events, on whichever thread asks first:

* ``take_events()``, ``digest()``, ``snapshot_events()`` and ``block_hashes()`` process what is
  pending and answer (one ``BlockStored`` per page for Python callers);
* a publisher steps through its ``RecordEncoder`` (``recorder.encoder(...)``): ``step()`` cuts
  what was recorded (its event count and batch plan are known at once, before any hashing),
  numbers the batches and queues them for the encoder's native thread, which processes the cuts
  in order and writes their v2 records without ever taking the GIL, and signals a socket when
  records are ready; a resync ``discard_all()``s what was cut and not written, and
  ``encode_opening()`` writes the new epoch's opening from the node table. Both take
  ``token_ids=False`` to write every store without its token ids (a token-free source,
  docs/security.md): the same hashes, pages and digests.

``tests/oracles/sink.py`` is the pure-Python twin (tests only; never chosen at run time).
"""

from __future__ import annotations

from cache.events._native import EventRecorder, RecordEncoder
from cache.events.errors import EventRecorderError

__all__ = ["EventRecorder", "EventRecorderError", "RecordEncoder"]
