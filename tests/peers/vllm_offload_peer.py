"""Driving ``tests/peers/vllm_offload_engine.py`` (vLLM's scheduler with its CPU
``OffloadingConnector``) in bench/.venv-vllm from the tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.peers.sglang_venv import PeerEngine, require_vllm


@dataclass(frozen=True, slots=True)
class TierProbe:
    """vLLM's own answers for one prompt after a step (tokens counted from the prompt's start).

    ``gpu``: ``kv_cache_manager.get_computed_blocks`` (the GPU hit); ``cpu``: the connector's
    ``get_num_new_matched_tokens`` after that hit (what it would load from the CPU, continuing
    where the GPU hit stops), None for a chunk in flight; ``cpu_from_zero``: the same asked with
    no GPU hit (how far the CPU tier alone holds the prompt)."""

    tokens: list[int]
    gpu: int
    cpu: int | None
    cpu_from_zero: int | None

    @property
    def kind(self) -> str:
        """Where the prompt's cached blocks live, in the words of the differential."""
        if self.cpu is None or self.cpu_from_zero is None:
            return "in flight"
        if self.gpu == 0:
            return "CPU only" if self.cpu else "neither"
        if self.cpu:
            return "CPU past GPU"
        return "both" if self.cpu_from_zero >= self.gpu else "GPU only"


class VllmOffloadEngine(PeerEngine):
    """vLLM's ``Scheduler`` with the ``OffloadingConnector`` and its CPU manager, publishing
    through vLLM's ``ZmqEventPublisher``; ``configure`` starts another run in the same process."""

    MODULE = "tests.peers.vllm_offload_engine"

    def __init__(self, endpoint: str, replay_endpoint: str) -> None:
        super().__init__(require_vllm(), endpoint, replay_endpoint)

    def configure(self, **config: Any) -> None:
        """A fresh engine run: ``endpoint``, ``replay_endpoint``, ``num_gpu_blocks``,
        ``num_cpu_blocks``, ``self_describing``, ``seed``, ``drop_tier_events``."""
        reply = self.command(cmd="configure", **config)
        if not reply.get("configured"):
            raise RuntimeError(f"the vLLM offloading peer did not configure: {reply}")

    def step(self, probe: bool = True) -> tuple[int | None, list[TierProbe]]:
        """One engine step: the seq of the batch it published (None: none) and vLLM's answers
        for the sampled prompts (none asked when ``probe`` is off)."""
        reply = self.command(cmd="step", probe=probe)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        probes = [TierProbe(tokens, gpu, cpu, zero) for tokens, gpu, cpu, zero in reply["probes"]]
        return reply["seq"], probes

    def stats(self) -> dict[str, Any]:
        """Events published so far by ``"<medium> stored|removed"``, load and store jobs
        completed, requests finished, a fingerprint of every event in order and the block sizes
        of its CPU ``BlockStored`` events."""
        return self.command(cmd="stats")

    def events(self, last: int = 5) -> list[list[dict[str, Any]]]:
        """The last ``last`` batches' events, each summarized."""
        batches: list[list[dict[str, Any]]] = self.command(cmd="events", last=last)["batches"]
        return batches
