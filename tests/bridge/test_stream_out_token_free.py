"""The stream out never sends a store without its token ids as if it had them: a batch of a
token-free source (its meta says ``token_ids: false``, or a store of pages has none) is refused
in every format and tombstone policy with ``TokenIdsWithheldError`` naming the source, before it
changes the run's residency state; vLLM's lower-tier placeholder (block size 0, no tokens) is
not such a store. ``swa-es follow`` meeting such a source end to end: tests/swa_es/
test_cli_token_free.py."""

from __future__ import annotations

from typing import Any

import pytest

from cache.events import AllBlocksCleared, BatchMeta, BlockStored, EventBatch
from swa_es.egress.config import POLICY_FORMATS, EngineFormat, TombstonePolicy
from swa_es.egress.encode import encode_engine_batch, engine_events
from swa_es.egress.errors import EgressError, TokenIdsWithheldError
from swa_es.egress.residency import ResidencyStream

META = BatchMeta(page_size=2, sliding_window_size=4)
STORE = BlockStored((1,), None, (5, 6), 2)
CASES = [
    (fmt, policy)
    for fmt in EngineFormat
    for policy in TombstonePolicy
    if POLICY_FORMATS.get(policy, fmt) is fmt
]


def _residency(policy: TombstonePolicy) -> ResidencyStream | None:
    return ResidencyStream(lambda source, block_hash: None) if policy.needs_state else None


@pytest.mark.parametrize(("fmt", "policy"), CASES)
@pytest.mark.parametrize(
    ("batch", "said"),
    [
        (
            EventBatch(
                "w0",
                "e",
                0,
                1.0,
                (AllBlocksCleared(), STORE),
                meta=BatchMeta(2, 4, token_ids=False),
            ),
            "its epoch's meta says token_ids: false",
        ),
        (
            EventBatch("w0", "e", 3, 1.0, (STORE, BlockStored((2,), 1, (), 2))),
            "BlockStored for block 2 has no token ids",
        ),
    ],
)
def test_a_token_free_batch_is_refused_naming_its_source(
    fmt: EngineFormat, policy: TombstonePolicy, batch: EventBatch, said: str
) -> None:
    residency = _residency(policy)
    for encode in (encode_engine_batch, engine_events):
        with pytest.raises(TokenIdsWithheldError) as refused:
            encode(batch, fmt, policy, residency)
        error = refused.value
        assert isinstance(error, EgressError)
        assert (error.source, error.reason) == ("w0", said)
        assert str(error).startswith("source 'w0': its writer withholds token ids")
    if residency is not None:  # the refused batch left no trace in the run's state
        assert residency.vllm_window("w0") is None


def _sent_tokens(event: list[Any] | dict[str, Any]) -> list[int] | None:
    """The token ids of a store as sent (sglang's tagged array or vLLM's map); None for any
    other event."""
    if isinstance(event, dict):
        return event["token_ids"] if event["type"] == "BlockStored" else None
    return event[3] if event[0] == "BlockStored" else None


@pytest.mark.parametrize(("fmt", "policy"), CASES)
def test_stores_with_token_ids_and_tier_placeholders_go_out(
    fmt: EngineFormat, policy: TombstonePolicy
) -> None:
    placeholder = BlockStored((9,), None, (), 0, medium="CPU")
    batch = EventBatch("w0", "e", 0, 1.0, (AllBlocksCleared(), STORE, placeholder), meta=META)
    sent = [_sent_tokens(event) for event in engine_events(batch, fmt, policy, _residency(policy))]
    assert [5, 6] in sent and [] in sent
