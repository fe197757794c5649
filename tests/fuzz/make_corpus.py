"""Writes the generated part of the fuzz corpus (``python -m tests.fuzz.make_corpus``).

Each case is named for what it holds. Cases found by hypothesis can be added by hand next to
these (any file in the kind's folder is replayed); rerunning this script rewrites only the
files it generates.
"""

from __future__ import annotations

import struct
import tempfile
import unittest.mock
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import orjson

from tests.fuzz.corpus import CORPUS_ROOT
from tests.fuzz.segments import DamagedLog, apply_damage, write_pristine
from tests.fuzz.snapshots import (
    PLANTED_GENERATION,
    base_case,
    decode_snapshot,
    encode_snapshot,
    set_replica_u32,
    with_inner_checksum,
)


def _records(count: int) -> list[tuple[str, bytes]]:
    return [(f"w{i % 3}", f"payload {i} ".encode() * (1 + i % 5)) for i in range(count)]


def _frame(offset: int, key: bytes, payload: bytes) -> bytes:
    """A valid frame written independently of the product's encoder (the documented format)."""
    body = struct.pack("<QdH", offset, 1.5, len(key)) + key + payload
    return struct.pack("<II", len(body), crc32c.crc32c(body)) + body


SEGMENT_CASES: dict[str, tuple[int, list[list[Any]]]] = {
    # name: (segment_bytes, damage) over 12 records
    "torn-tail-in-header": (1 << 20, [["truncate", 0, -1]]),
    "torn-tail-in-body": (1 << 20, [["truncate", 0, -40]]),
    "flipped-crc-mid-active-segment": (1 << 20, [["flip", 0, 200, 3]]),
    "flipped-byte-in-sealed-segment": (300, [["flip", 0, 50, 0]]),
    "huge-length-first-frame": (1 << 20, [["huge_length", 0, 0, 0xFFFFFFFF]]),
    "huge-length-last-frame": (1 << 20, [["huge_length", 0, 11, 0xFFFFFFFF]]),
    "length-below-minimum": (1 << 20, [["huge_length", 0, 4, 3]]),
    "length-one-past-frame": (1 << 20, [["huge_length", 0, 4, 0x0100]]),
    "zero-filled-tail": (1 << 20, [["tail", 0, [0] * 4096]]),
    "garbage-tail": (1 << 20, [["tail", 0, list(b"\xde\xad\xbe\xef" * 9)]]),
    "deleted-middle-segment": (300, [["delete_segment", 1]]),
    "deleted-last-segment": (300, [["delete_segment", -1]]),
    "truncated-sealed-segment": (300, [["truncate", 0, 100]]),
    "garbage-index": (300, [["garbage_index", 0, list(range(64))]]),
    "every-segment-flipped": (300, [["flip", 0, 7, 1], ["flip", 1, 7, 1], ["flip", 2, 7, 1]]),
}


def _segment_cases(out: Path) -> None:
    for name, (segment_bytes, damage) in SEGMENT_CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            pristine = write_pristine(Path(tmp) / "log", _records(12), segment_bytes)
        resolved = [_resolve(step, pristine) for step in damage]
        case = apply_damage(pristine, resolved)
        (out / f"{name}.json").write_bytes(case.to_json(name.replace("-", " ")))
    # A valid frame whose offset repeats the previous one (a writer bug): hand-made bytes.
    with tempfile.TemporaryDirectory() as tmp:
        pristine = write_pristine(Path(tmp) / "log", _records(4), 1 << 20)
    (name,) = pristine.segments
    duplicated = pristine.segments[name] + _frame(3, b"w0", b"the same offset again")
    case = DamagedLog(pristine.records, {name: duplicated}, {}, [["hand-made"]], intact=4)
    (out / "duplicate-offset-frame.json").write_bytes(case.to_json("a valid frame, wrong offset"))


def _resolve(step: list[Any], case: DamagedLog) -> list[Any]:
    """Negative positions count from the end of the named segment."""
    kind, seg, *args = step
    names = sorted(case.segments)
    seg = seg % len(names)
    if kind in ("truncate", "flip") and args[0] < 0:
        args[0] += len(case.segments[names[seg]])
    return [kind, seg, *args]


def _batch(**changes: Any) -> dict[str, Any]:
    batch: dict[str, Any] = {
        "v": 1,
        "source": "worker-0",
        "epoch": "e1",
        "seq": 3,
        "ts": 1.5,
        "events": [
            {"type": "AllBlocksCleared"},
            {
                "type": "BlockStored",
                "block_hashes": [11, 12],
                "parent_block_hash": None,
                "token_ids": [1, 2, 3, 4],
                "block_size": 2,
                "lora_id": None,
                "medium": "GPU",
            },
            {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"},
            {"type": "BlockSWAEvicted", "block_hashes": [11]},
            {"type": "BlockSWARestored", "block_hashes": [11]},
        ],
        "digest": None,
        "meta": None,
    }
    batch.update(changes)
    return batch


def _with_event(index: int, **changes: Any) -> dict[str, Any]:
    batch = _batch()
    event = dict(batch["events"][index])
    for key, value in changes.items():
        if value is _DROP:
            event.pop(key)
        else:
            event[key] = value
    batch["events"][index] = event
    return batch


_DROP = object()

# name: (bytes, the DecodeError field path, or None for a valid batch)
DECODE_CASES: dict[str, tuple[bytes, str | None]] = {
    "valid": (orjson.dumps(_batch()), None),
    "empty": (b"", ""),
    "not-json": (b"{not json", ""),
    "json-array": (b"[1, 2, 3]", ""),
    "json-string": (b'"batch"', ""),
    "deep-nesting": (b"[" * 100_000 + b"]" * 100_000, ""),
    "deep-nesting-in-meta": (
        orjson.dumps(_batch(meta=None)).replace(
            b'"meta":null', b'"meta":{"x":' + b"[" * 5000 + b"]" * 5000 + b"}"
        ),
        "",
    ),
    "nul-bytes": (b"\x00" * 64, ""),
    "invalid-utf8": (b'{"v":1,"source":"\xff\xfe"}', ""),
    "version-2-unknown": (orjson.dumps(_batch(v=99)), "v"),
    "version-bool": (orjson.dumps(_batch(v=True)), "v"),
    "missing-source": (
        orjson.dumps({k: v for k, v in _batch().items() if k != "source"}),
        "source",
    ),
    "extra-field": (orjson.dumps(_batch(extra=1)), "extra"),
    "seq-negative": (orjson.dumps(_batch(seq=-1)), "seq"),
    "seq-float": (orjson.dumps(_batch(seq=1.0)), "seq"),
    "ts-string": (orjson.dumps(_batch(ts="now")), "ts"),
    "events-object": (orjson.dumps(_batch(events={})), "events"),
    "meta-list": (orjson.dumps(_batch(meta=[1])), "meta"),
    "digest-int": (orjson.dumps(_batch(digest=5)), "digest"),
    "event-not-object": (
        orjson.dumps(_batch(events=[{"type": "AllBlocksCleared"}, 7])),
        "events[1]",
    ),
    "event-unknown-type": (orjson.dumps(_with_event(0, type="BlockExploded")), "events[0].type"),
    "event-type-missing": (orjson.dumps(_with_event(2, type=_DROP)), "events[2].type"),
    "hash-over-int64": (
        orjson.dumps(_with_event(1, block_hashes=[11, 2**63])),
        "events[1].block_hashes[1]",
    ),
    "hash-bool": (orjson.dumps(_with_event(3, block_hashes=[True])), "events[3].block_hashes[0]"),
    "hashes-empty": (orjson.dumps(_with_event(4, block_hashes=[])), "events[4].block_hashes"),
    "token-negative": (
        orjson.dumps(_with_event(1, token_ids=[1, 2, -3, 4])),
        "events[1].token_ids[2]",
    ),
    "token-over-uint32": (
        orjson.dumps(_with_event(1, token_ids=[1, 2, 3, 2**32])),
        "events[1].token_ids[3]",
    ),
    "tokens-wrong-count": (
        orjson.dumps(_with_event(1, token_ids=[1, 2, 3])),
        "events[1].token_ids",
    ),
    "block-size-zero": (orjson.dumps(_with_event(1, block_size=0)), "events[1].block_size"),
    "parent-string": (
        orjson.dumps(_with_event(1, parent_block_hash="x")),
        "events[1].parent_block_hash",
    ),
    "medium-int": (orjson.dumps(_with_event(2, medium=1)), "events[2].medium"),
    "stored-extra-field": (orjson.dumps(_with_event(1, extra=0)), "events[1].extra"),
    "cleared-extra-field": (
        orjson.dumps(_with_event(0, block_hashes=[1])),
        "events[0].block_hashes",
    ),
    "huge-int-literal": (b'{"v":1,"seq":' + b"9" * 5000 + b"}", ""),
}


def _decode_cases(out: Path) -> None:
    for name, (data, field) in DECODE_CASES.items():
        (out / f"{name}.json").write_bytes(
            orjson.dumps({"input_hex": data.hex(), "field": field}, option=orjson.OPT_INDENT_2)
        )


def _snapshot_cases(out: Path) -> None:
    real_manifest, views = decode_snapshot(base_case().newest_snapshot)
    # Planted as generation PLANTED_GENERATION: each case fails only for the reason it names.
    manifest = {**real_manifest, "generation": PLANTED_GENERATION}
    good = encode_snapshot(manifest, views)
    names = [name for name, _ in manifest["views"]]
    replicas = names.index("replicas")

    def with_manifest(**changes: Any) -> bytes:
        return encode_snapshot({**manifest, **changes}, views)

    def with_view(index: int, data: bytes) -> bytes:
        sizes = [
            [name, len(data) if i == index else size]
            for i, (name, size) in enumerate(manifest["views"])
        ]
        return encode_snapshot(
            {**manifest, "views": sizes}, [data if i == index else v for i, v in enumerate(views)]
        )

    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x04
    cases = {
        "empty-file": b"",
        "truncated-header": good[:10],
        "truncated-middle": good[: len(good) // 2],
        "flipped-body-byte": bytes(flipped),
        "flipped-crc": good[:-1] + bytes([good[-1] ^ 0xFF]),
        "wrong-magic": b"NOTASNAP" + good[8:],
        "future-version": encode_snapshot(manifest, views, version=2),
        "manifest-not-json": _raw_manifest(b"{not json", b"".join(views)),
        "manifest-array": encode_snapshot([1, 2, 3], views),
        "manifest-missing-views": encode_snapshot(
            {k: v for k, v in manifest.items() if k != "views"}, views
        ),
        "manifest-length-past-end": _manifest_length(good, 10**9),
        "view-size-huge": with_manifest(views=[[n, 2**40] for n in names]),
        "view-size-negative": with_manifest(views=[[n, -1] for n in names]),
        "view-name-twice": with_manifest(views=[[names[0], 0], [names[0], 0]]),
        "generation-string": with_manifest(generation="7"),
        "generation-not-the-file-name": with_manifest(generation=3),
        "position-garbage": with_manifest(position={"zero": "x"}),
        "cursors-negative-seq": with_manifest(
            cursors={s: {**c, "seq": -5} for s, c in manifest["cursors"].items()}
        ),
        "replica-slot-count-huge": with_view(
            replicas, set_replica_u32(views[replicas], "slots", 2**32 - 1)
        ),
        "replica-free-count-huge": with_view(
            replicas, set_replica_u32(views[replicas], "free", 2**32 - 1)
        ),
        "replica-index-capacity-huge": with_view(
            replicas, set_replica_u32(views[replicas], "capacity", 2**32 - 1)
        ),
        "replica-block-size-huge": with_view(
            replicas, set_replica_u32(views[replicas], "block_size", 2**32 - 1)
        ),
        "replica-count-huge": with_view(
            replicas, set_replica_u32(views[replicas], "count", 2**32 - 1)
        ),
        "replica-trailing-bytes": with_view(
            replicas, with_inner_checksum(views[replicas][:-4] + b"\x00" * 9)
        ),
        "replica-inner-checksum-wrong": with_view(
            replicas, views[replicas][:-1] + bytes([views[replicas][-1] ^ 0x01])
        ),
    }
    for name, data in cases.items():
        (out / f"{name}.swasnap").write_bytes(data)


def _raw_manifest(manifest: bytes, views: bytes) -> bytes:
    head = struct.pack("<8sIII", b"SWAESNAP", 1, len(manifest), crc32c.crc32c(manifest))
    body = head + manifest + views
    return body + struct.pack("<I", crc32c.crc32c(body))


def _manifest_length(good: bytes, length: int) -> bytes:
    body = good[:12] + struct.pack("<I", length) + good[16:-4]
    return body + struct.pack("<I", crc32c.crc32c(body))


HTTP_CASES: dict[str, bytes] = {
    "garbage": b"\x00\x01\x02 hello\r\n\r\n",
    "request-line-without-version": b"GET /healthz\r\n\r\n",
    "version-garbage": b"GET /healthz HTTX/1.1\r\nHost: x\r\n\r\n",
    "header-without-colon": b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n",
    "header-name-with-space": b"GET /healthz HTTP/1.1\r\nBad Name: x\r\n\r\n",
    "content-length-negative": b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "content-length-not-a-number": (
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n"
    ),
    "unknown-method": b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "unknown-path": b"GET /v1/nothing-here HTTP/1.1\r\nHost: x\r\n\r\n",
    "post-to-metrics": b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    "match-bad-json": b"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n{",
    "match-token-ids-not-a-list": (
        b"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 19\r\n\r\n{"token_ids": "ab"}'
    ),
    "match-deep-nesting": (
        b"POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n"
        + b"[" * 10000
        + b"]" * 10000
    ),
    "head-of-16-kib": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 16384 + b"\r\n\r\n",
}


def _http_cases(out: Path) -> None:
    for name, data in HTTP_CASES.items():
        (out / f"{name}.http").write_bytes(data)


WRITERS: dict[str, Callable[[Path], None]] = {
    "http": _http_cases,
    "segments": _segment_cases,
    "decode": _decode_cases,
    "snapshots": _snapshot_cases,
}


def main() -> None:
    """Rewrite every generated corpus file (with a frozen clock, so a rerun changes nothing)."""
    with unittest.mock.patch("time.time", return_value=1_700_000_000.0):
        _write_all()


def _write_all() -> None:
    for kind, write in WRITERS.items():
        out = CORPUS_ROOT / kind
        out.mkdir(parents=True, exist_ok=True)
        write(out)
        print(f"{kind}: {len(list(out.iterdir()))} files in {out}")


if __name__ == "__main__":
    main()
