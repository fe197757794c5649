"""Driving ``tests/peers/vllm_hybrid_engine.py`` (vLLM's hybrid KV-cache manager) in
bench/.venv-vllm from the tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.peers.sglang_venv import PeerEngine, require_vllm


@dataclass(frozen=True, slots=True)
class Probe:
    """What vLLM's own ``get_computed_blocks`` answered for one prompt after a step."""

    tokens: list[int]
    full: int
    hybrid: int
    capped: int


class VllmHybridEngine(PeerEngine):
    """vLLM's ``KVCacheManager`` with a full-attention and a sliding-window group, publishing
    through vLLM's ``ZmqEventPublisher``; ``configure`` starts another run in the same process."""

    MODULE = "tests.peers.vllm_hybrid_engine"

    def __init__(self, endpoint: str, replay_endpoint: str) -> None:
        super().__init__(require_vllm(), endpoint, replay_endpoint)

    def configure(self, **config: Any) -> None:
        """A fresh engine run: ``endpoint``, ``replay_endpoint``, ``window``, ``retention``
        (0 or None), ``num_blocks``, ``seed``, ``swa_groups``."""
        reply = self.command(cmd="configure", **config)
        assert reply.get("configured"), reply

    def step(self) -> tuple[int | None, list[Probe]]:
        """One scheduler step: the seq of the batch it published (None: nothing changed) and
        vLLM's answers for the sampled prompts."""
        reply = self.command(cmd="step")
        if "error" in reply:
            raise RuntimeError(reply["error"])
        probes = [
            Probe(tokens, full, hybrid, capped) for tokens, full, hybrid, capped in reply["probes"]
        ]
        return reply["seq"], probes

    def removed(self) -> list[int]:
        """``BlockRemoved`` events the run published so far, per group (0: full, then the
        sliding-window groups)."""
        return [int(count) for count in self.command(cmd="removed")["removed"]]
