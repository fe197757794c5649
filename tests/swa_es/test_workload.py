"""Tests of the deterministic multi-turn chat workload."""

from __future__ import annotations

from collections import Counter

import pytest

from swa_es.engine.workload import ChatRequest, ChatWorkload


def _stream(workload: ChatWorkload, count: int) -> list[tuple[int, list[int], list[int]]]:
    return [(r.conversation_id, r.prompt_ids, r.output_ids) for r in workload.take(count)]


def test_same_seed_gives_the_same_stream() -> None:
    """Two workloads with one seed produce identical requests; another seed differs."""
    assert _stream(ChatWorkload(seed=7), 300) == _stream(ChatWorkload(seed=7), 300)
    assert _stream(ChatWorkload(seed=7), 50) != _stream(ChatWorkload(seed=8), 50)


def test_first_turn_is_a_system_prompt_plus_a_user_turn() -> None:
    """A new conversation's prompt is a shared system prompt followed by 64 user tokens."""
    workload = ChatWorkload(seed=1)
    prompts = workload.system_prompts
    first = workload.next_request()
    assert len(first.prompt_ids) == 512 + 64
    assert len(first.output_ids) == 128
    assert first.prompt_ids[:512] in prompts
    assert len(prompts) == 24
    assert all(len(p) == 512 for p in prompts)


def test_a_continuation_extends_the_whole_history() -> None:
    """Continuing a conversation prefixes the new prompt with the previous prompt and reply."""
    history: dict[int, list[int]] = {}
    continued = 0
    for request in ChatWorkload(seed=2).take(500):
        previous = history.get(request.conversation_id)
        if previous is not None:
            continued += 1
            assert request.prompt_ids[: len(previous)] == previous
            assert len(request.prompt_ids) == len(previous) + 64
        history[request.conversation_id] = request.prompt_ids + request.output_ids
    assert continued > 250


def test_about_thirty_percent_of_requests_start_a_conversation() -> None:
    """The share of first turns is near new_conversation_prob (plus conversations closed by cap)."""
    seen: set[int] = set()
    new = 0
    requests = ChatWorkload(seed=3).take(4000)
    for request in requests:
        if request.conversation_id not in seen:
            new += 1
            seen.add(request.conversation_id)
    assert 0.27 <= new / len(requests) <= 0.40


def test_system_prompts_follow_a_zipf_popularity() -> None:
    """The rank-1 system prompt is the most used and the use falls off with rank."""
    workload = ChatWorkload(seed=4)
    index = {tuple(p): rank for rank, p in enumerate(workload.system_prompts)}
    counts: Counter[int] = Counter()
    seen: set[int] = set()
    for request in workload.take(6000):
        if request.conversation_id not in seen:
            seen.add(request.conversation_id)
            counts[index[tuple(request.prompt_ids[:512])]] += 1
    assert counts.most_common(1)[0][0] == 0
    assert counts[0] > 2 * counts[5] > 0
    assert sum(counts[r] for r in range(3)) > sum(counts[r] for r in range(12, 24))


def test_conversations_are_capped() -> None:
    """No request exceeds max_conversation_tokens and at most max_open_conversations stay open."""
    workload = ChatWorkload(seed=5, max_conversation_tokens=1500, max_open_conversations=4)
    for request in workload.take(2000):
        assert len(request.prompt_ids) + len(request.output_ids) <= 1500
        assert workload.open_conversations <= 4


def test_defaults_fit_the_benchmark_pools() -> None:
    """With the defaults one request never needs more than 4096 tokens (the documented cap)."""
    longest = max(len(r.prompt_ids) + len(r.output_ids) for r in ChatWorkload(seed=6).take(3000))
    assert 3000 < longest <= 4096


def test_token_ids_stay_inside_the_vocabulary() -> None:
    """Every token id lies in [1, vocab_size)."""
    for request in ChatWorkload(seed=9, vocab_size=50).take(200):
        assert all(1 <= t < 50 for t in request.prompt_ids + request.output_ids)


def test_requests_are_plain_values() -> None:
    """A request is a ChatRequest with int lists, so callers can slice and concatenate it."""
    request = ChatWorkload().next_request()
    assert isinstance(request, ChatRequest)
    assert all(type(t) is int for t in request.prompt_ids)


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("system_prompts", 0),
        ("user_turn_tokens", 0),
        ("new_conversation_prob", 1.5),
        ("max_conversation_tokens", 100),
        ("max_open_conversations", 0),
        ("vocab_size", 1),
        ("zipf_exponent", -1.0),
    ],
)
def test_bad_knobs_are_rejected_by_name(knob: str, value: object) -> None:
    """An out-of-range knob raises ValueError naming it."""
    with pytest.raises(ValueError, match=knob):
        ChatWorkload(**{knob: value})  # type: ignore[arg-type]  # deliberately loose kwargs
