"""Decoding the SWA residency extension of sglang's stream (``swa_es.integrations.sglang``)."""

from __future__ import annotations

import msgpack
import pytest

from swa_es.bridge.formats import EngineStored, EngineSWAResidency, WireFormat, decode_batch
from swa_es.bridge.wire import FrameError
from swa_es.integrations.sglang.wire import SWA_EVENT_FIELDS, SWA_EVICTED, SWA_RESTORED


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def test_tagged_arrays_and_maps_decode_alike() -> None:
    """0.5.16's arrays and the tagged maps of later releases give the same residency events."""
    arrays = pack(
        [
            1.0,
            [
                [SWA_EVICTED, [11, -12], "GPU", 128],
                [SWA_RESTORED, [11], "GPU", 128],
                [SWA_RESTORED, [], "GPU", 128],
            ],
            0,
        ]
    )
    restored = dict(zip(("type", *SWA_EVENT_FIELDS), (SWA_RESTORED, [11], "GPU", 128), strict=True))
    evicted = {"type": SWA_EVICTED, "block_hashes": [11, -12], "medium": "GPU"}
    evicted |= {"sliding_window_size": 128, "future_field": 1}
    declared = {"type": SWA_RESTORED, "block_hashes": [], "medium": "GPU"}
    declared |= {"sliding_window_size": 128}
    maps = pack([1.0, [evicted, restored, declared]])
    expected = (
        EngineSWAResidency((11, -12), False, 128, "GPU"),
        EngineSWAResidency((11,), True, 128, "GPU"),
        EngineSWAResidency((), True, 128, "GPU"),  # the window declared, no block changed
    )
    for fmt in (WireFormat.SGLANG, WireFormat.AUTO):
        assert decode_batch(arrays, fmt).events == expected
        assert decode_batch(maps, fmt).events == expected
        assert decode_batch(arrays, fmt).unknown_types == ()


def test_vllm_format_skips_the_extension() -> None:
    """A stream read as vLLM's reports the extension's events as unknown, never applies them."""
    payload = pack(
        [1.0, [["BlockStored", [1], None, [1], 1, None, "GPU"], [SWA_EVICTED, [1], "GPU", 4]]]
    )
    batch = decode_batch(payload, WireFormat.VLLM)
    assert batch.events == (EngineStored((1,), None, (1,), 1, "GPU"),)
    assert batch.unknown_types == (SWA_EVICTED,)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ([SWA_EVICTED, [1], "GPU"], "events[0].sliding_window_size"),
        ([SWA_EVICTED, [1], "GPU", 0], "events[0].sliding_window_size"),
        ([SWA_EVICTED, [1], "GPU", "128"], "events[0].sliding_window_size"),
        ([SWA_RESTORED, None, "GPU", 8], "events[0].block_hashes"),
        ([SWA_RESTORED, [1, "x"], "GPU", 8], "events[0].block_hashes[1]"),
        ([SWA_RESTORED, [1], 5, 8], "events[0].medium"),
        (
            {"type": SWA_EVICTED, "block_hashes": [1], "medium": "GPU"},
            "events[0].sliding_window_size",
        ),
    ],
)
def test_bad_extension_events_name_the_field(event: object, field: str) -> None:
    """Anything that does not fit is a FrameError naming the field, never a guess."""
    with pytest.raises(FrameError) as caught:
        decode_batch(pack([1.0, [event]]), WireFormat.SGLANG)
    assert caught.value.where == field
