"""A smoke run of the compiled core on one interpreter, with nothing but the standard library.

Run as ``python abi3_smoke.py PATH_TO_NATIVE_SO``: it loads the extension module from that file
(no package around it, so no third-party import), binds stand-in event classes of the same
fields, and calls each family of functions once: hashing, the token reader (list, tuple, array,
bytes), the codec both ways, the recorder and the replica store. Prints ``ok`` and the Python
version; any failure raises. ``test_native_abi.py`` runs it on every interpreter it finds.
"""

from __future__ import annotations

import array
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = "GPU"


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]
    medium: str | None = "GPU"
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class BlockSWAEvicted:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BlockSWARestored:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


@dataclass(frozen=True, slots=True)
class EventBatch:
    source: str
    epoch: str
    seq: int
    ts: float
    events: tuple[Any, ...]
    digest: str | None = None
    meta: Any = field(default=None, hash=False)
    v: int = 2


class BatchMeta:
    pass


class DecodeError(ValueError):
    pass


class EventRecorderError(RuntimeError):
    pass


class ReplicaConsistencyError(ValueError):
    pass


class ReplicaSnapshotError(ValueError):
    pass


def load(path: str) -> Any:
    loader = importlib.machinery.ExtensionFileLoader("cache.events._native", path)
    spec = importlib.util.spec_from_file_location("cache.events._native", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main(path: str) -> None:
    native = load(path)
    classes = (
        BlockStored,
        BlockRemoved,
        BlockSWAEvicted,
        BlockSWARestored,
        AllBlocksCleared,
        EventBatch,
        BatchMeta,
        DecodeError,
        EventRecorderError,
        ReplicaConsistencyError,
        ReplicaSnapshotError,
    )
    native.bind_classes({cls.__name__: cls for cls in classes})

    prior = native.namespace_prior(None)
    tokens = [1, 2, 3, 4, (1 << 32) - 1, 1 << 30, 7, 8]
    hashes = native.chain_block_hashes(prior, tokens, 2)
    assert len(hashes) == 4
    assert native.chain_block_hashes(prior, tuple(tokens), 2) == hashes
    assert native.chain_block_hashes(prior, array.array("I", tokens), 2) == hashes
    for given in (tokens, tuple(tokens), array.array("I", tokens), array.array("q", tokens)):
        assert native.prompt_token_ids(given) == tokens, given
    assert native.prompt_token_ids(b"\x01\x02") == [1, 2]
    for bad in ([1, -1], [1, 1 << 32], [1, "2"]):
        try:
            native.prompt_token_ids(bad)
        except (TypeError, ValueError):
            pass
        else:
            raise AssertionError(f"accepted {bad}")

    stored = BlockStored((hashes[0],), None, (1, 2), 2)
    batch = EventBatch("w0", "e", 0, 1796401612.72265625, (AllBlocksCleared(), stored))
    record = native.encode_batch(batch, None)
    assert b'"ts":1796401612.7226562,' in record, record
    wire = native.decode_wire(record, 1 << 20)
    assert wire.to_batch() == batch, wire.to_batch()
    assert native.decode_event(b'{"type":"BlockSWAEvicted","block_hashes":[5]}', "e") == (
        BlockSWAEvicted((5,))
    )
    try:
        native.decode_wire(b"{", 1 << 20)
    except DecodeError:
        pass
    else:
        raise AssertionError("decoded a broken record")

    recorder = native.EventRecorder(2)
    recorder.root(1, None)
    recorder.stored(2, 1, tokens[:4])
    events = recorder.take_events()
    assert [type(event) for event in events] == [BlockStored, BlockStored], events
    assert events[0].block_hashes == (hashes[0],) and events[1].parent_block_hash == hashes[0]
    meta = b'{"page_size":2,"sliding_window_size":4}'
    records = recorder.encode_opening("w0", "e", 1.0, meta, 100, 1 << 20)
    assert records and all(isinstance(data, bytes) for data, _ in records)

    store = native.ReplicaStore()
    store.add_source("w0")
    store.apply_events("w0", [AllBlocksCleared(), *events])
    assert store.block_count("w0") == 2
    try:
        store.apply_events("w0", [BlockRemoved((12345,))])
    except ReplicaConsistencyError:
        pass
    else:
        raise AssertionError("removed an unknown block")
    print("ok", sys.version.split()[0])


if __name__ == "__main__":
    main(sys.argv[1])
