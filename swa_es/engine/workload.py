"""A deterministic multi-turn chat workload for driving a prefix cache.

Every request is one assistant turn of one conversation. A conversation starts from one of
``system_prompts`` shared system prompts (``system_prompt_tokens`` long, chosen by a Zipf law of
exponent ``zipf_exponent`` over their ranks) and grows by a ``user_turn_tokens`` user turn (the
new part of the prompt) and an ``assistant_turn_tokens`` reply (the output) per request. With
probability ``new_conversation_prob`` a request starts a new conversation; otherwise it continues
one of the open conversations, chosen uniformly.

Two caps keep the working set bounded so it fits the benchmark's pools (full 32768, SWA 8192
slots): a conversation whose next turn would exceed ``max_conversation_tokens`` (prompt plus
output) is closed and a new one starts in its place, and at most ``max_open_conversations`` stay
open (starting one more closes the oldest). With the defaults a conversation lasts at most 18
turns (512 + 18 * 192 = 3968 <= 4096 tokens), so one request never needs more than 4096 slots of
either pool even on a complete cache miss.

Everything comes from one seeded ``random.Random``: the same seed and knobs give the same request
stream on every run and machine.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["ChatRequest", "ChatWorkload"]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One request: the whole conversation so far plus the new user turn, and the reply."""

    conversation_id: int
    prompt_ids: list[int]
    output_ids: list[int]


class ChatWorkload:
    """A seeded, endless stream of ``ChatRequest``; see the module docstring for the model."""

    def __init__(
        self,
        seed: int = 0,
        *,
        system_prompts: int = 24,
        system_prompt_tokens: int = 512,
        zipf_exponent: float = 1.1,
        user_turn_tokens: int = 64,
        assistant_turn_tokens: int = 128,
        new_conversation_prob: float = 0.3,
        max_conversation_tokens: int = 4096,
        max_open_conversations: int = 32,
        vocab_size: int = 32000,
    ) -> None:
        _require(system_prompts >= 1, "system_prompts", system_prompts, "must be at least 1")
        _require(system_prompt_tokens >= 0, "system_prompt_tokens", system_prompt_tokens, ">= 0")
        _require(zipf_exponent >= 0, "zipf_exponent", zipf_exponent, "must be >= 0")
        _require(user_turn_tokens >= 1, "user_turn_tokens", user_turn_tokens, "must be >= 1")
        _require(assistant_turn_tokens >= 1, "assistant_turn_tokens", assistant_turn_tokens, ">= 1")
        _require(
            0.0 <= new_conversation_prob <= 1.0,
            "new_conversation_prob",
            new_conversation_prob,
            "must lie in [0, 1]",
        )
        first_turn = system_prompt_tokens + user_turn_tokens + assistant_turn_tokens
        _require(
            max_conversation_tokens >= first_turn,
            "max_conversation_tokens",
            max_conversation_tokens,
            f"must hold at least one turn ({first_turn} tokens)",
        )
        _require(
            max_open_conversations >= 1, "max_open_conversations", max_open_conversations, ">= 1"
        )
        _require(vocab_size >= 2, "vocab_size", vocab_size, "must be at least 2")
        self._rng = random.Random(seed)
        self._token_ids = range(1, vocab_size)  # 0 is left out: engines often pad with it
        self._user_turn_tokens = user_turn_tokens
        self._assistant_turn_tokens = assistant_turn_tokens
        self._new_conversation_prob = new_conversation_prob
        self._max_conversation_tokens = max_conversation_tokens
        self._max_open = max_open_conversations
        self._prompts = [self._tokens(system_prompt_tokens) for _ in range(system_prompts)]
        weights = [1.0 / (rank**zipf_exponent) for rank in range(1, system_prompts + 1)]
        self._prompt_cum_weights = list(itertools.accumulate(weights))
        self._open: OrderedDict[int, list[int]] = OrderedDict()
        self._next_id = 0

    @property
    def system_prompts(self) -> list[list[int]]:
        """The shared system prompts, most popular (rank 1) first."""
        return [list(p) for p in self._prompts]

    @property
    def open_conversations(self) -> int:
        """How many conversations are open (may be continued)."""
        return len(self._open)

    def next_request(self) -> ChatRequest:
        """The next request of the stream: a new conversation's first turn or a continuation."""
        conversation_id = self._pick_conversation()
        history = self._open[conversation_id]
        prompt = history + self._tokens(self._user_turn_tokens)
        output = self._tokens(self._assistant_turn_tokens)
        self._open[conversation_id] = prompt + output
        return ChatRequest(conversation_id, prompt, output)

    def take(self, count: int) -> list[ChatRequest]:
        """The next ``count`` requests."""
        return [self.next_request() for _ in range(count)]

    def _pick_conversation(self) -> int:
        if self._open and self._rng.random() >= self._new_conversation_prob:
            conversation_id = self._rng.choice(list(self._open))
            turn_tokens = self._user_turn_tokens + self._assistant_turn_tokens
            if len(self._open[conversation_id]) + turn_tokens <= self._max_conversation_tokens:
                return conversation_id
            del self._open[conversation_id]
        return self._start_conversation()

    def _start_conversation(self) -> int:
        if len(self._open) >= self._max_open:
            self._open.popitem(last=False)
        rank = self._rng.choices(range(len(self._prompts)), cum_weights=self._prompt_cum_weights)
        conversation_id = self._next_id
        self._next_id += 1
        self._open[conversation_id] = list(self._prompts[rank[0]])
        return conversation_id

    def _tokens(self, count: int) -> list[int]:
        return self._rng.choices(self._token_ids, k=count)


def _require(ok: bool, name: str, value: object, reason: str) -> None:
    if not ok:
        raise ValueError(f"ChatWorkload: {name}={value!r} {reason}")
