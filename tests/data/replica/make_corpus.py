"""Writes the replica corpus: nasty record streams that tests/consumers/test_replica_corpus.py
replays every run through the native follower path and through the pure-Python reference.

Each ``<name>.jsonl`` holds one log record per line (the record's payload, JSON text, written
as is: some lines are deliberately not valid records). The streams are deterministic; run
``.venv/bin/python tests/data/replica/make_corpus.py`` to write them again after changing this
script, and commit the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    StateDigest,
    chain_block_hashes,
    encode_batch,
    namespace_prior,
)
from tests.oracles.codec import batch_to_v1_pages_dict

HERE = Path(__file__).parent
INT64_MIN, INT64_MAX, UINT32_MAX = -(1 << 63), (1 << 63) - 1, (1 << 32) - 1


class Stream:
    """Records of several sources, numbered like publishers number them."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.seqs: dict[tuple[str, str], int] = {}

    def batch(
        self,
        source: str,
        epoch: str,
        events: Sequence[Event],
        *,
        seq: int | None = None,
        meta: BatchMeta | None = None,
        digest: str | None = None,
        version: int = 2,
    ) -> None:
        """One record (v2 compacts chains; v1 writes one object per page)."""
        key = (source, epoch)
        if seq is None:
            seq = self.seqs.get(key, -1) + 1
        self.seqs[key] = seq
        ts = 1000.0 + len(self.lines)
        batch = EventBatch(source, epoch, seq, ts, tuple(events), digest, meta, v=2)
        if version == 2:
            self.lines.append(encode_batch(batch))
        else:
            self.lines.append(orjson.dumps(batch_to_v1_pages_dict(batch)))

    def raw(self, text: str | bytes) -> None:
        """A record as it is (usually not a valid one)."""
        self.lines.append(text.encode() if isinstance(text, str) else text)

    def write(self, name: str) -> None:
        (HERE / f"{name}.jsonl").write_bytes(b"".join(line + b"\n" for line in self.lines))


def meta(page_size: int = 1, window: int = 4, **extra: Any) -> BatchMeta:
    return BatchMeta(page_size, window, digest_alg=DIGEST_ALGORITHM, **extra)


def chain(tokens: Sequence[int], page_size: int = 1, extra_key: str | None = None) -> list[int]:
    return chain_block_hashes(namespace_prior(extra_key), list(tokens), page_size)


def stored(
    hashes: Sequence[int], parent: int | None, tokens: Sequence[int], page_size: int = 1
) -> BlockStored:
    return BlockStored(tuple(hashes), parent, tuple(tokens), page_size)


PROMPT = [7, 1, 3, 3, 8, 2, 9, 4, 4, 1, 0, 6]


def inconsistent_events() -> Stream:
    """Each source meets one kind of event that does not fit its replica; the events before it
    in its batch stay applied, the source diverges, and a new epoch heals it."""
    s = Stream()
    h = chain(PROMPT)
    cases: dict[str, list[Event]] = {
        "stored-twice": [stored(h[:3], None, PROMPT[:3]), stored(h[2:4], h[1], PROMPT[2:4])],
        "unknown-parent": [stored(h[:2], None, PROMPT[:2]), stored([h[5]], h[4], [PROMPT[5]])],
        "named-twice": [stored([h[0], h[1], h[0]], None, PROMPT[:3])],
        "remove-with-children": [stored(h[:4], None, PROMPT[:4]), BlockRemoved((h[1],))],
        "remove-named-twice": [stored(h[:4], None, PROMPT[:4]), BlockRemoved((h[3], h[3]))],
        "remove-unknown": [stored(h[:2], None, PROMPT[:2]), BlockRemoved((h[6],))],
        "evict-unknown": [stored(h[:2], None, PROMPT[:2]), BlockSWAEvicted((h[0], h[9]))],
        "restore-unknown": [stored(h[:2], None, PROMPT[:2]), BlockSWARestored((h[8],))],
        "size-changes": [
            stored(h[:2], None, PROMPT[:2]),
            stored(chain(PROMPT, 2)[:1], None, PROMPT[:2], 2),
        ],
    }
    for source, events in cases.items():
        s.batch(source, "e1", [AllBlocksCleared(), *events], meta=meta())
        s.batch(source, "e1", [stored([h[11]], None, [5])])  # skipped while diverged
        s.batch(source, "e2", [AllBlocksCleared(), stored(h[:2], None, PROMPT[:2])], meta=meta())
    # the meta says page 2, the first store has block_size 1
    s.batch(
        "meta-mismatch",
        "e1",
        [AllBlocksCleared(), stored(h[:2], None, PROMPT[:2])],
        meta=meta(page_size=2),
    )
    return s


def extremes_and_versions() -> Stream:
    """int64 and uint32 extremes, v1 one-object-per-page records beside v2 compacted chains,
    a multi-page remove of a tombstoned chain, and clears in the middle of a batch."""
    s = Stream()
    odd = [INT64_MIN, INT64_MAX, 0, -1, 1]
    s.batch(
        "w",
        "e",
        [AllBlocksCleared(), stored(odd, None, [UINT32_MAX, 0, 1, UINT32_MAX, 7])],
        meta=meta(),
        version=1,
    )
    s.batch("w", "e", [BlockSWAEvicted((INT64_MAX, 0)), BlockSWAEvicted((0,))], version=2)
    s.batch("w", "e", [BlockSWARestored((0,)), BlockRemoved((-1, 1))], version=1)
    h = chain(PROMPT, 3, "lora")
    s.batch("w", "e", [stored(h, None, PROMPT, 3)], version=2)  # block_size 3 after 1: diverges
    s.batch("lora3", "e", [AllBlocksCleared(), stored(h, None, PROMPT, 3)], meta=meta(3, 5))
    s.batch("lora3", "e", [BlockSWAEvicted(tuple(h[1:])), BlockRemoved(tuple(reversed(h[2:])))])
    s.batch(
        "lora3",
        "e",
        [
            stored(h[2:3], h[1], PROMPT[6:9], 3),
            AllBlocksCleared(),
            stored(h[:2], None, PROMPT[:6], 3),
        ],
        version=1,
    )
    # a chain stored page by page in one v1 record, then a removal of all of it at once
    p = chain(PROMPT)
    pages = [stored([p[i]], p[i - 1] if i else None, [PROMPT[i]]) for i in range(len(p))]
    s.batch("pages", "e", [AllBlocksCleared(), *pages], meta=meta(window=2), version=1)
    s.batch("pages", "e", [BlockSWAEvicted((p[3], p[7])), BlockRemoved(tuple(p[9:]))])
    return s


def undecodable_and_gaps() -> Stream:
    """Garbage between good records, a duplicate, a gap, a stale epoch and an epoch that
    starts without AllBlocksCleared."""
    s = Stream()
    h = chain(PROMPT)
    s.batch("w", "e1", [AllBlocksCleared(), stored(h[:4], None, PROMPT[:4])], meta=meta())
    s.raw(b"not json at all")
    s.raw('{"v":4,"source":"w","epoch":"e1","seq":1,"ts":0,"events":[],"digest":null,"meta":null}')
    s.raw(
        '{"v":2,"source":"w","epoch":"e1","seq":1,"ts":0,"events":[{"type":"Nope"}],'
        '"digest":null,"meta":null}'
    )
    s.raw(
        '{"v":2,"source":"w","epoch":"e1","seq":1,"ts":0,"events":[{"type":"BlockStored",'
        '"block_hashes":[1],"parent_block_hash":null,"token_ids":[1,2],"block_size":1,'
        '"lora_id":null,"medium":"GPU"}],"digest":null,"meta":null}'
    )
    s.raw(b"[1,2,3]")
    s.raw(
        '{"v":2,"source":"w","epoch":"e1","seq":1,"ts":0,"events":[{"type":"BlockRemoved",'
        '"block_hashes":[18446744073709551616],"medium":"GPU"}],"digest":null,"meta":null}'
    )
    s.batch("w", "e1", [stored(h[4:6], h[3], PROMPT[4:6])])
    s.batch("w", "e1", [stored(h[6:7], h[5], PROMPT[6:7])], seq=1)  # duplicate seq
    s.batch("w", "e1", [stored(h[6:8], h[5], PROMPT[6:8])], seq=3)  # gap
    s.batch("w", "e2", [AllBlocksCleared(), stored(h[:3], None, PROMPT[:3])], meta=meta())
    s.batch("w", "e1", [stored([h[9]], h[8], [PROMPT[9]])], seq=4)  # stale
    s.batch("v", "e1", [stored(h[:2], None, PROMPT[:2])], seq=0, meta=meta())  # no clear
    s.batch("v", "e1", [stored([h[2]], h[1], [PROMPT[2]])])
    s.batch("u", "e1", [stored(h[:2], None, PROMPT[:2])], seq=5, meta=meta())  # starts late
    return s


def shared_blocks() -> Stream:
    """Several sources hold the same blocks (one holder set per block in the prefix index);
    one tombstones, one drops its copy, one clears, one diverges, one says it reports no
    tombstones, one uses another page size."""
    s = Stream()
    h = chain(PROMPT)
    for source in ("a", "b", "c", "d", "e"):
        extra = {"swa_events": False} if source == "e" else {}
        s.batch(source, "e", [AllBlocksCleared(), stored(h, None, PROMPT)], meta=meta(**extra))
    h4 = chain(PROMPT, 4)
    s.batch("p4", "e", [AllBlocksCleared(), stored(h4, None, PROMPT, 4)], meta=meta(page_size=4))
    s.batch("a", "e", [BlockSWAEvicted((h[2], h[6]))])
    s.batch("b", "e", [BlockRemoved(tuple(reversed(h[5:])))])
    s.batch("c", "e", [AllBlocksCleared(), stored(h[:3], None, PROMPT[:3])])
    s.batch("d", "e", [BlockRemoved((h[0],))])  # still has children: diverges
    s.batch("p4", "e", [BlockSWAEvicted((h4[1],))])
    s.batch("a", "e", [BlockSWARestored((h[2],)), BlockSWAEvicted((h[2],))])
    return s


def digests() -> Stream:
    """In-band digests: a right one, a wrong one (divergence), and one under a meta naming
    another algorithm (unverifiable, never a divergence)."""
    s = Stream()
    h = chain(PROMPT)
    right = StateDigest()
    right.add(h[0], None, True)
    right.add(h[1], h[0], True)
    s.batch(
        "right",
        "e",
        [AllBlocksCleared(), stored(h[:2], None, PROMPT[:2])],
        meta=meta(),
        digest=right.hexdigest(),
    )
    s.batch(
        "wrong",
        "e",
        [AllBlocksCleared(), stored(h[:2], None, PROMPT[:2])],
        meta=meta(),
        digest="0123456789abcdef",
    )
    other = BatchMeta(1, 4, digest_alg="blake2b-v0")
    s.batch(
        "other",
        "e",
        [AllBlocksCleared(), stored(h[:2], None, PROMPT[:2])],
        meta=other,
        digest="0123456789abcdef",
    )
    return s


STREAMS = {
    "inconsistent_events": inconsistent_events,
    "extremes_and_versions": extremes_and_versions,
    "undecodable_and_gaps": undecodable_and_gaps,
    "shared_blocks": shared_blocks,
    "digests": digests,
}

if __name__ == "__main__":
    for name, make in STREAMS.items():
        make().write(name)
        print(f"wrote {name}.jsonl")
