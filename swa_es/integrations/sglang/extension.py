"""The extension's two event classes, made on the ``KVCacheEvent`` base of the sglang release the
integration is installed into (a tagged array in 0.5.16, a tagged map in 0.5.23), so sglang's own
encoder and publisher send them like its own events. Names and field order: ``wire``."""

from __future__ import annotations

from typing import Any

from swa_es.integrations.sglang.wire import SWA_EVENT_FIELDS, SWA_EVICTED, SWA_RESTORED

_FIELD_TYPES: dict[str, Any] = {
    "block_hashes": list[int],
    "medium": str | None,
    "sliding_window_size": int,
}
_DOCS = {
    SWA_EVICTED: "The SWA KV of ``block_hashes`` was freed; their full KV is kept.",
    SWA_RESTORED: "The tombstoned ``block_hashes`` hold SWA KV again.",
}


def event_classes(base: type[Any], module: str) -> tuple[type[Any], type[Any]]:
    """(``BlockSWAEvicted``, ``BlockSWARestored``) as msgspec structs on sglang's ``base``;
    ``module`` is the module they are reported to belong to."""
    annotations = {name: _FIELD_TYPES[name] for name in SWA_EVENT_FIELDS}
    made = [
        type(
            name,
            (base,),
            {"__annotations__": dict(annotations), "__doc__": _DOCS[name], "__module__": module},
        )
        for name in (SWA_EVICTED, SWA_RESTORED)
    ]
    return made[0], made[1]
