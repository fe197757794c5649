"""The interface a serving engine implements so a primary can publish its KV cache.

A primary loop only needs a cache (what the publisher reads events from) and a way to run one
scheduler step (what mutates that cache). ``SyntheticEngine`` implements it with the
deterministic chat workload; a real engine integration implements the same two members.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cache.errors import SwaEsError
from swa_es.publish.batching import PublishedCache

if TYPE_CHECKING:
    from cache import SWARadixCache
    from swa_es.engine.worker import CacheWorker
    from swa_es.engine.workload import ChatWorkload


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """One primary's cache: pool sizes in slots, window and page in tokens, torch device."""

    full_size: int
    swa_size: int
    window_tokens: int
    page_size: int
    device: str


class DeviceUnavailableError(SwaEsError, ValueError):
    """The cache's torch device does not exist on this machine (e.g. cuda without a GPU)."""


class ServedCache(PublishedCache, Protocol):
    """The cache as a primary sees it: what the publisher reads, plus its size."""

    def total_size(self) -> tuple[int, int]:
        """(full tokens, SWA-resident tokens) the tree holds."""
        ...


class Engine(Protocol):
    """A serving engine whose radix cache a ``Publisher`` publishes."""

    @property
    def cache(self) -> ServedCache:
        """The cache the engine mutates."""
        ...

    def step(self) -> int:
        """Run one scheduler step (which mutates ``cache``); return the requests it served."""
        ...


class SyntheticEngine:
    """Serves the deterministic chat workload on a ``SWARadixCache``, one request per step."""

    def __init__(self, cache: SWARadixCache, workload: ChatWorkload, worker: CacheWorker) -> None:
        self._cache = cache
        self._workload = workload
        self._worker = worker

    @property
    def cache(self) -> SWARadixCache:
        """The tree being served from."""
        return self._cache

    @property
    def workload(self) -> ChatWorkload:
        """The request stream."""
        return self._workload

    def step(self) -> int:
        """Serve the workload's next request."""
        self._worker.serve(self._workload.next_request())
        return 1


def build_cache(config: CacheConfig) -> SWARadixCache:
    """A fresh SWA radix cache with events on, sized by ``config``.

    Raises ``DeviceUnavailableError`` for a CUDA device on a machine without one.
    """
    import torch

    from cache import SWAKVAllocator, SWARadixCache

    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceUnavailableError(f"{config.device} requested but CUDA is not available")

    allocator = SWAKVAllocator(
        full_size=config.full_size,
        swa_size=config.swa_size,
        page_size=config.page_size,
        device=config.device,
    )
    return SWARadixCache(
        allocator,
        sliding_window_size=config.window_tokens,
        page_size=config.page_size,
        enable_events=True,
    )


def synthetic_engine(config: CacheConfig, seed: int) -> SyntheticEngine:
    """The synthetic engine on a fresh cache: workload seeded with ``seed``."""
    from swa_es.engine.worker import CacheWorker
    from swa_es.engine.workload import ChatWorkload

    cache = build_cache(config)
    return SyntheticEngine(cache, ChatWorkload(seed=seed), CacheWorker(cache))
