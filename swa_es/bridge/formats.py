"""Decode the msgpack KV-event batches of sglang and vLLM into plain engine events.

Accepted forms (any of them in ``auto``; see ``WireFormat``):

- sglang 0.5.16: ``EventBatch`` as an array ``[ts, events, attn_dp_rank?]`` whose events are
  tagged arrays: ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
  lora_id, medium?]``, ``["BlockRemoved", block_hashes, medium?]``, ``["AllBlocksCleared"]``;
  a ``BlockStored`` may carry an eighth element, a metadata map (``cache_salt``).
- sglang after PR #37482 and vLLM (current): the same batch array, with tagged-map events
  ``{"type": "BlockStored", "block_hashes": ..., ..., "session_id": ...}``.
- vLLM's older positional events: ``BlockStored`` arrays continuing with ``lora_name``,
  ``extra_keys``, ``group_idx``, ``kv_cache_spec_kind``, ``kv_cache_spec_sliding_window``;
  ``BlockRemoved`` with ``group_idx``.
- vLLM's per-group stores of a hybrid model: a group whose ``kv_cache_spec_kind`` is not full
  attention (sliding window, Mamba) may be sparse (``token_ids`` span the request's new blocks,
  ``block_hashes`` name the few it keeps, or none); vLLM's CPU-offload placeholders have
  ``block_size`` 0, no tokens and no parent (``swa_es.bridge.vllm_groups``, the mirror).

- sglang with ``swa_es.integrations.sglang`` installed: its SWA residency extension
  (``swa_es.integrations.sglang.wire``), ``["BlockSWAEvicted" | "BlockSWARestored",
  block_hashes, medium, sliding_window_size]`` or the same as a tagged map, decoded into
  ``EngineSWAResidency`` (in ``sglang`` and ``auto``; ``vllm`` skips them as unknown).

Unknown fields are ignored; unknown event types are reported (``EngineBatch.unknown_types``),
not fatal. Anything else that does not fit raises ``FrameError`` naming the part.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgpack

from swa_es.bridge.vllm_groups import FULL_ATTENTION_KINDS
from swa_es.bridge.wire import FrameError
from swa_es.integrations.sglang.wire import SWA_EVENT_FIELDS, SWA_EVENT_TAGS, SWA_RESTORED

BlockKey: TypeAlias = int | bytes
"""An engine's block hash: an int (sglang, vLLM) or raw digest bytes (vLLM)."""

DEFAULT_MAX_PAYLOAD_BYTES: Final = 16 * 1024 * 1024
_MAX_TOKEN: Final = 0xFFFFFFFF


class WireFormat(enum.StrEnum):
    """Which engine's batches a stream carries (``auto`` accepts every form above)."""

    SGLANG = "sglang"
    VLLM = "vllm"
    AUTO = "auto"

    @classmethod
    def parse(cls, value: WireFormat | str) -> WireFormat:
        """The format named by ``value``; ``ValueError`` naming the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(f.value for f in cls)
            raise ValueError(f"format: expected one of {names}, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class EngineStored:
    """Pages an engine stored: its own hashes, its parent's, and the pages' tokens.

    ``namespace`` is what separates caches with the same tokens (vLLM's ``lora_name``,
    sglang's ``cache_salt``); ``extra_keys`` are vLLM's per-block keys beyond the LoRA name
    (multimodal items, salts, embeddings), which no token-only query can reproduce.
    """

    block_hashes: tuple[BlockKey, ...]
    parent_block_hash: BlockKey | None
    token_ids: tuple[int, ...]
    block_size: int
    medium: str | None = None
    namespace: str | None = None
    extra_keys: tuple[Any, ...] | None = None
    group_idx: int | None = None
    group_kind: str | None = None
    sliding_window: int | None = None


@dataclass(frozen=True, slots=True)
class EngineRemoved:
    """Blocks an engine dropped."""

    block_hashes: tuple[BlockKey, ...]
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class EngineCleared:
    """The engine dropped every block."""


@dataclass(frozen=True, slots=True)
class EngineSWAResidency:
    """An engine says the SWA KV of blocks it holds was freed (``resident`` False: the blocks
    are tombstoned, their full KV kept) or is held again (``resident`` True).

    ``sliding_window_size`` is the window, in tokens, that the engine's own prefix match applies
    to these blocks; it travels with the event so that a consumer needs no flag of its own.
    """

    block_hashes: tuple[BlockKey, ...]
    resident: bool
    sliding_window_size: int
    medium: str | None = None


EngineEvent: TypeAlias = EngineStored | EngineRemoved | EngineCleared | EngineSWAResidency


@dataclass(frozen=True, slots=True)
class EngineBatch:
    """One decoded engine batch; ``unknown_types`` lists event tags it skipped."""

    ts: float
    events: tuple[EngineEvent, ...]
    dp_rank: int | None = None
    unknown_types: tuple[str, ...] = ()


def _type_name(value: object) -> str:
    return type(value).__name__


def _hash(value: object, where: str) -> BlockKey:
    if type(value) is int or type(value) is bytes:
        return value
    raise FrameError(where, f"expected an int or bytes block hash, got {_type_name(value)}")


def _hashes(value: object, where: str) -> tuple[BlockKey, ...]:
    if type(value) is not list or not value:
        raise FrameError(where, f"expected a non-empty list, got {_type_name(value)}")
    return tuple(_hash(item, f"{where}[{index}]") for index, item in enumerate(value))


def _optional_hash(value: object, where: str) -> BlockKey | None:
    return None if value is None else _hash(value, where)


def _tokens(value: object, where: str) -> tuple[int, ...]:
    if type(value) is not list:
        raise FrameError(where, f"expected a list, got {_type_name(value)}")
    for index, token in enumerate(value):
        if type(token) is not int:
            detail = (
                "token pairs (EAGLE bigram keys) are not supported"
                if type(token) is list
                else f"expected an int token id, got {_type_name(token)}"
            )
            raise FrameError(f"{where}[{index}]", detail)
        if not 0 <= token <= _MAX_TOKEN:
            raise FrameError(f"{where}[{index}]", f"token id {token} outside [0, 2**32)")
    return tuple(value)


def _positive_int(value: object, where: str) -> int:
    if type(value) is not int or value <= 0:
        raise FrameError(where, f"expected a positive int, got {value!r}")
    return value


def _optional_int(value: object, where: str) -> int | None:
    if value is None or type(value) is int:
        return value
    raise FrameError(where, f"expected an int or null, got {_type_name(value)}")


def _optional_str(value: object, where: str) -> str | None:
    if value is None or type(value) is str:
        return value
    raise FrameError(where, f"expected a string or null, got {_type_name(value)}")


def _extra_keys(value: object, where: str) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if type(value) is not list:
        raise FrameError(where, f"expected a list or null, got {_type_name(value)}")
    return tuple(value)


def _block_shape(
    fields: Mapping[str, Any], where: str, medium: str | None, kind: str | None
) -> tuple[int, tuple[BlockKey, ...], tuple[int, ...]]:
    """(block size, hashes, tokens) of a store, in one of three shapes: dense (a token block
    per hash); vLLM's sliding-window and other non-full-attention groups, sparse (token_ids span
    the request's new blocks, hashes name only those the group keeps, maybe none); vLLM's
    offload placeholders (block size 0, no tokens, no parent, a medium other than GPU)."""
    raw_size = fields.get("block_size")
    tokens = _tokens(fields.get("token_ids"), f"{where}.token_ids")
    if type(raw_size) is int and raw_size == 0 and medium not in (None, "GPU"):
        if tokens or fields.get("parent_block_hash") is not None:
            raise FrameError(f"{where}.block_size", "0 (a placeholder) with tokens or a parent")
        return 0, _hashes(fields.get("block_hashes"), f"{where}.block_hashes"), tokens
    block_size = _positive_int(raw_size, f"{where}.block_size")
    if kind is not None and kind not in FULL_ATTENTION_KINDS:
        raw_hashes = fields.get("block_hashes")
        hashes = () if raw_hashes == [] else _hashes(raw_hashes, f"{where}.block_hashes")
        if len(tokens) % block_size or len(hashes) > len(tokens) // block_size:
            raise FrameError(
                f"{where}.token_ids",
                f"{len(tokens)} tokens do not span {len(hashes)} block(s) of size {block_size}",
            )
        return block_size, hashes, tokens
    hashes = _hashes(fields.get("block_hashes"), f"{where}.block_hashes")
    if len(tokens) != block_size * len(hashes):
        raise FrameError(
            f"{where}.token_ids",
            f"{len(tokens)} tokens for {len(hashes)} block(s) of size {block_size}",
        )
    return block_size, hashes, tokens


def _stored(fields: Mapping[str, Any], where: str) -> EngineStored:
    medium = _optional_str(fields.get("medium"), f"{where}.medium")
    kind = _optional_str(fields.get("kv_cache_spec_kind"), f"{where}.kv_cache_spec_kind")
    block_size, hashes, tokens = _block_shape(fields, where, medium, kind)
    lora_name = _optional_str(fields.get("lora_name"), f"{where}.lora_name")
    cache_salt = _optional_str(fields.get("cache_salt"), f"{where}.cache_salt")
    metadata = fields.get("metadata")
    if isinstance(metadata, dict) and cache_salt is None:
        cache_salt = _optional_str(metadata.get("cache_salt"), f"{where}.metadata.cache_salt")
    if lora_name is not None and cache_salt is not None:
        namespace: str | None = f"{lora_name}\x00{cache_salt}"
    else:
        namespace = lora_name if lora_name is not None else cache_salt
    extra = _extra_keys(fields.get("extra_keys"), f"{where}.extra_keys")
    if extra is not None and len(extra) != len(hashes):
        raise FrameError(
            f"{where}.extra_keys", f"{len(extra)} entries for {len(hashes)} block hash(es)"
        )
    return EngineStored(
        block_hashes=hashes,
        parent_block_hash=_optional_hash(
            fields.get("parent_block_hash"), f"{where}.parent_block_hash"
        ),
        token_ids=tokens,
        block_size=block_size,
        medium=medium,
        namespace=namespace,
        extra_keys=_strip_lora(extra, lora_name),
        group_idx=_optional_int(fields.get("group_idx"), f"{where}.group_idx"),
        group_kind=kind,
        sliding_window=_optional_int(
            fields.get("kv_cache_spec_sliding_window"), f"{where}.kv_cache_spec_sliding_window"
        ),
    )


def _strip_lora(extra: tuple[Any, ...] | None, lora_name: str | None) -> tuple[Any, ...] | None:
    """vLLM's per-block extra keys without the LoRA name (already the namespace); None when no
    block has anything left."""
    if extra is None:
        return None
    stripped: list[Any] = []
    for keys in extra:
        items = list(keys) if isinstance(keys, list | tuple) else ([] if keys is None else [keys])
        if lora_name is not None and items and items[0] == lora_name:
            items = items[1:]
        stripped.append(tuple(items) if items else None)
    return tuple(stripped) if any(item is not None for item in stripped) else None


def _removed(fields: Mapping[str, Any], where: str) -> EngineRemoved:
    return EngineRemoved(
        block_hashes=_hashes(fields.get("block_hashes"), f"{where}.block_hashes"),
        medium=_optional_str(fields.get("medium"), f"{where}.medium"),
        group_idx=_optional_int(fields.get("group_idx"), f"{where}.group_idx"),
    )


def _swa_residency(tag: str, fields: Mapping[str, Any], where: str) -> EngineSWAResidency:
    """The SWA extension's event; no hashes: the stream declares its window (wire docs)."""
    hashes = fields.get("block_hashes")
    return EngineSWAResidency(
        block_hashes=() if hashes == [] else _hashes(hashes, f"{where}.block_hashes"),
        resident=tag == SWA_RESTORED,
        sliding_window_size=_positive_int(
            fields.get("sliding_window_size"), f"{where}.sliding_window_size"
        ),
        medium=_optional_str(fields.get("medium"), f"{where}.medium"),
    )


_STORED_POSITIONS: Final = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
_VLLM_STORED_TAIL: Final = (
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
)
_REMOVED_POSITIONS: Final = ("block_hashes", "medium", "group_idx")


def _positional(tag: str, items: Sequence[Any], fmt: WireFormat, where: str) -> dict[str, Any]:
    """The named fields of a tagged-array event."""
    if tag == "BlockRemoved":
        return dict(zip(_REMOVED_POSITIONS, items, strict=False))
    if tag in SWA_EVENT_TAGS:
        return dict(zip(SWA_EVENT_FIELDS, items, strict=False))
    if tag != "BlockStored":
        return {}
    fields = dict(zip(_STORED_POSITIONS, items, strict=False))
    if len(items) < 4:
        raise FrameError(where, f"BlockStored array has {len(items)} fields, expected >= 4")
    tail = items[len(_STORED_POSITIONS) :]
    if tail and isinstance(tail[0], dict):
        if fmt is WireFormat.VLLM:
            raise FrameError(f"{where}[7]", "a metadata map is sglang's, not vLLM's")
        fields["metadata"] = tail[0]
    elif tail:
        if fmt is WireFormat.SGLANG:
            raise FrameError(f"{where}[7]", "expected sglang's metadata map")
        fields.update(zip(_VLLM_STORED_TAIL, tail, strict=False))
    return fields


def decode_event(raw: object, fmt: WireFormat, where: str) -> EngineEvent | str:
    """One engine event, or the tag of an event type this bridge does not know."""
    if isinstance(raw, list):
        if not raw or type(raw[0]) is not str:
            raise FrameError(where, "expected a tagged array [type, ...]")
        tag: object = raw[0]
        assert isinstance(tag, str)
        fields = _positional(tag, raw[1:], fmt, where)
    elif isinstance(raw, dict):
        tag = raw.get("type")
        if type(tag) is not str:
            raise FrameError(f"{where}.type", f"expected the event's type tag, got {tag!r}")
        fields = raw
    else:
        raise FrameError(where, f"expected a tagged array or map, got {_type_name(raw)}")
    if tag == "BlockStored":
        return _stored(fields, where)
    if tag == "BlockRemoved":
        return _removed(fields, where)
    if tag == "AllBlocksCleared":
        return EngineCleared()
    if tag in SWA_EVENT_TAGS and fmt is not WireFormat.VLLM:
        return _swa_residency(tag, fields, where)
    return tag


def _unpack(payload: bytes, max_payload_bytes: int) -> object:
    if len(payload) > max_payload_bytes:
        raise FrameError("", f"payload of {len(payload)} bytes exceeds {max_payload_bytes}")
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise FrameError("", f"not msgpack: {exc}") from None


def decode_batch(
    payload: bytes,
    fmt: WireFormat = WireFormat.AUTO,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> EngineBatch:
    """Decode one engine batch; ``FrameError`` naming the part that does not fit."""
    raw = _unpack(payload, max_payload_bytes)
    if isinstance(raw, list):
        if len(raw) < 2:
            raise FrameError("batch", f"expected [ts, events, ...], got {len(raw)} element(s)")
        ts, raw_events = raw[0], raw[1]
        rank = raw[2] if len(raw) > 2 else None
    elif isinstance(raw, dict):
        ts, raw_events = raw.get("ts"), raw.get("events")
        rank = raw.get("attn_dp_rank", raw.get("data_parallel_rank"))
    else:
        raise FrameError("batch", f"expected an array or map, got {_type_name(raw)}")
    if type(ts) not in (int, float):
        raise FrameError("batch.ts", f"expected a number, got {_type_name(ts)}")
    if type(raw_events) is not list:
        raise FrameError("batch.events", f"expected a list, got {_type_name(raw_events)}")
    events: list[EngineEvent] = []
    unknown: list[str] = []
    for index, raw_event in enumerate(raw_events):
        decoded = decode_event(raw_event, fmt, f"events[{index}]")
        if isinstance(decoded, str):
            unknown.append(decoded)
        else:
            events.append(decoded)
    return EngineBatch(
        ts=float(ts),
        events=tuple(events),
        dp_rank=rank if type(rank) is int else None,
        unknown_types=tuple(unknown),
    )
