"""Prefix matching in the native store: how a prompt's token ids are read, and the reuse of
recent prompts' page digests, never change an answer or an error.

Token ids are read through the C API from a list of ints, in bulk from a buffer of integers, and
through the iterator from anything else; every kind of input gives the answer of the same ids as
a list, and every bad input the error the general conversion gives. Page digests of recent
prompts are reused across queries; answers stay equal to the pure-Python reference whatever came
before.
"""

from __future__ import annotations

import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.events import BatchMeta, BlockStored, chain_block_hashes, namespace_prior
from cache.events.replica_store import ReplicaStore, prompt_token_ids
from tests.fixtures.prompts import shrinking_prompt
from tests.oracles.replica import ReferenceReplicaSet

from .test_native_replica import fleets

PAGE = 4


def _fleet(prompts: list[list[int]], page_size: int = PAGE) -> ReplicaStore:
    """One source per prompt, holding all of it."""
    store = ReplicaStore()
    for index, prompt in enumerate(prompts):
        source = f"w{index}"
        store.set_meta(source, BatchMeta(page_size, 8))
        hashes = tuple(chain_block_hashes(b"", prompt, page_size))
        tokens = tuple(prompt[: len(hashes) * page_size])
        store.apply_events(source, [BlockStored(hashes, None, tokens, page_size)])
    return store


# ids across the digit boundaries of CPython ints (one digit: < 2**30; two: < 2**60)
PROMPT = [0, 1, 255, 256, 65535, (1 << 30) - 1, 1 << 30, (1 << 31) + 3, (1 << 32) - 1, 7, 9, 11]


class Index:
    """An object with ``__index__`` standing for an int."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


class Sub(int):
    """A subclass of int (read by the general conversion)."""


def test_large_ids_read_through_the_c_api_equal_the_general_conversion() -> None:
    """Ids of one and two digits, up to 2**32 - 1, hash as the reference hashes them."""
    store = _fleet([PROMPT])
    assert store.match_prefix(PROMPT) == [("w0", 12, 12)]
    assert store.match_prefix([Sub(t) for t in PROMPT]) == [("w0", 12, 12)]
    mixed: list[object] = [Index(t) if i % 3 == 0 else t for i, t in enumerate(PROMPT)]
    assert store.match_prefix(mixed) == [("w0", 12, 12)]  # type: ignore[arg-type]
    assert store.match_prefix([False, *PROMPT[1:]]) == [("w0", 12, 12)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.integers(0, (1 << 32) - 1)
        | st.integers(-(1 << 70), 1 << 70)
        | st.sampled_from([0, 1 << 30, (1 << 32) - 1, 1 << 32, -1, True])
        | st.builds(Index, st.integers(0, (1 << 32) - 1))
        | st.builds(Sub, st.integers(0, 9))
        | st.sampled_from([1.0, "7", None]),
        max_size=40,
    )
)
def test_a_list_read_through_the_c_api_equals_one_read_by_iteration(items: list[object]) -> None:
    """A list (read through the C API) and a tuple (read through its iterator): the same ids,
    or the same error naming the same id."""
    ids: Sequence[int] = items  # type: ignore[assignment]
    readers: list[Callable[[], list[int]]] = [
        lambda: prompt_token_ids(ids),
        lambda: prompt_token_ids(tuple(ids)),
        lambda: prompt_token_ids(deque(ids)),
    ]
    outcomes: list[tuple[str, object]] = []
    for read in readers:
        try:
            outcomes.append(("ids", read()))
        except (TypeError, ValueError) as error:
            outcomes.append((type(error).__name__, str(error)))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    if outcomes[0][0] == "ids":
        assert outcomes[0][1] == [int(item) for item in items]  # type: ignore[call-overload]


def test_the_list_reader_stops_where_an_index_method_shortens_the_list() -> None:
    """An ``__index__`` that deletes the rest of the list ends the read there."""
    prompt = shrinking_prompt()
    assert prompt_token_ids(prompt) == [0, 1, 2, 3]  # type: ignore[arg-type]


SMALL = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9]


def _array(code: str) -> Callable[[list[int]], object]:
    return lambda ids: array.array(code, ids)


KINDS: dict[str, Callable[[list[int]], object]] = {
    "tuple": tuple,
    "iterator": iter,
    **{f"array {code}": _array(code) for code in "bBhHiIlLqQ"},
    "bytes": bytes,
    "bytearray": bytearray,
    "memoryview": lambda ids: memoryview(bytes(ids)),
    "memoryview cast": lambda ids: memoryview(array.array("q", ids)).cast("B").cast("q"),
    "numpy int64": lambda ids: np.array(ids, dtype=np.int64),
    "numpy uint32": lambda ids: np.array(ids, dtype=np.uint32),
    "numpy int32 strided": lambda ids: np.repeat(np.array(ids, dtype=np.int32), 2)[::2],
    "numpy big-endian": lambda ids: np.array(ids, dtype=">i4"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_sequence_gives_the_answer_of_its_ids(kind: str) -> None:
    """Tuples, iterables, int buffers of every width and order, NumPy vectors: as the list."""
    store = _fleet([SMALL, SMALL[:5]])
    expected = store.match_prefix(SMALL)
    assert expected == [("w0", 12, 12), ("w1", 4, 4)]
    assert store.match_prefix(KINDS[kind](SMALL)) == expected  # type: ignore[arg-type]


def _error(store: ReplicaStore, token_ids: object) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError)) as caught:
        store.match_prefix(token_ids)  # type: ignore[arg-type]
    return caught.type, str(caught.value)


BAD: dict[str, tuple[list[object], type[BaseException], str]] = {
    "negative": ([1, 2, -1, -5], ValueError, "token id -1 outside [0, 2**32)"),
    "2**32": ([1, 1 << 32], ValueError, "token id 4294967296 outside [0, 2**32)"),
    "huge": ([10**30, -1], ValueError, f"token id {10**30} outside [0, 2**32)"),
    "float": ([1, 2.0], TypeError, "token ids must be ints, got float"),
    "str": (["1"], TypeError, "token ids must be ints, got str"),
    "None after a bad id": ([1 << 40, None], ValueError, f"token id {1 << 40} outside"),
    "a bad id past the walk": ([*SMALL, 99, -3], ValueError, "token id -3 outside"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_id_gives_the_same_error_from_a_list_a_tuple_and_an_iterator(case: str) -> None:
    """The first bad id is named, in the words of the general conversion, from every path."""
    store = _fleet([SMALL])
    ids, error, words = BAD[case]
    for token_ids in (ids, tuple(ids), iter(ids)):
        kind, message = _error(store, token_ids)
        assert kind is error
        assert message.startswith(words)


def test_a_bad_id_in_a_buffer_gives_the_words_of_the_list() -> None:
    """A negative or too large id in an int buffer raises as the same id in a list."""
    store = _fleet([SMALL])
    for code, bad in (("q", -7), ("i", -1), ("Q", 1 << 40), ("Q", (1 << 64) - 1), ("b", -2)):
        ids = [1, 2, bad, 3]
        assert _error(store, array.array(code, ids)) == _error(store, ids)
    assert _error(store, np.array([1, -4], dtype=np.int16)) == _error(store, [1, -4])


def test_a_float_buffer_is_refused_as_its_floats_are() -> None:
    """Only integer buffers are read in bulk; a float one is read item by item, and refused."""
    store = _fleet([SMALL])
    assert _error(store, array.array("d", [1.0])) == _error(store, [1.0])
    assert _error(store, np.array([1.5])) == (TypeError, "token ids must be ints, got float64")


def test_repeated_and_diverging_prompts_keep_their_answers() -> None:
    """Queries that share prefixes with earlier ones, more of them than the kept digests,
    across namespaces and page sizes, each answer as on a fresh store."""
    base = list(range(40))
    held = [*(base[:n] + [100 + n] * 8 for n in range(0, 40, 4)), base]
    queries = [p for _ in range(3) for p in held] + [base[:17], [*base, 5, 5, 5, 5, 5]]
    expected = [_fleet(held).match_prefix(query) for query in queries]
    store = _fleet(held)
    for query, answer in zip(queries, expected, strict=True):
        assert store.match_prefix(query) == answer
        assert store.match_prefix(query, "lora") == []
    other_page = _fleet(held, page_size=2)
    for query in queries:
        other_page.match_prefix(query)
    assert other_page.match_prefix(base) == _fleet(held, page_size=2).match_prefix(base)


@settings(max_examples=100, deadline=None)
@given(fleets(), st.data())
def test_a_sequence_of_queries_equals_the_reference(
    fleet: tuple[ReplicaStore, ReferenceReplicaSet, list[list[int]]], data: st.DataObject
) -> None:
    """Many queries in a row (each after the ones before it), as the reference answers each."""
    store, reference, prompts = fleet
    for _ in range(data.draw(st.integers(1, 12))):
        base = data.draw(st.sampled_from(prompts))
        query = base[: data.draw(st.integers(0, len(base)))] + data.draw(
            st.lists(st.integers(0, 3), max_size=6)
        )
        extra_key = data.draw(st.none() | st.just("lora"))
        native = {s: (h, u) for s, h, u in store.match_prefix(query, extra_key)}
        assert native == reference.match(query, extra_key)
    assert namespace_prior(None) == b""


@dataclass(frozen=True, slots=True)
class Lengths:
    """A result type for ``match_into``: exactly ``full_tokens`` and ``swa_tokens``."""

    full_tokens: int | None
    swa_tokens: int | None


def test_match_into_makes_one_result_per_distinct_answer() -> None:
    """Sources with equal answers share one (immutable) result; others get their own."""
    store = _fleet([SMALL, SMALL, SMALL[:5], SMALL])
    store.mark_diverged("w3", "gap")
    result = store.match_into(SMALL, None, Lengths)
    assert result == {
        "w0": Lengths(12, 12),
        "w1": Lengths(12, 12),
        "w2": Lengths(4, 4),
        "w3": Lengths(None, None),
    }
    assert result["w0"] is result["w1"]
    assert result["w0"] is not result["w2"]
