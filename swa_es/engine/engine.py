"""The interface a serving engine implements so a primary can publish its KV cache.

A primary loop only needs a cache (what the publisher reads events from) and a way to run one
scheduler step (what mutates that cache). ``SyntheticEngine`` implements it with the
deterministic chat workload; a real engine integration implements the same two members.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cache.errors import SwaEsError
from swa_es.options import FieldError, option
from swa_es.options import values as v
from swa_es.publish.batching import PublishedCache

if TYPE_CHECKING:
    from cache import SWARadixCache
    from swa_es.engine.worker import CacheWorker
    from swa_es.engine.workload import ChatWorkload


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheConfig:
    """One primary's cache: window and page in tokens, pool sizes in slots, torch device (the
    options of ``demo`` and ``serve``). Each pool holds whole pages: ``FieldError`` otherwise."""

    window_tokens: int = option(
        "window", v.positive_int, "sliding window in tokens", default=256, metavar="TOKENS"
    )
    page_size: int = option(
        "page-size", v.positive_int, "tokens per page", default=16, metavar="TOKENS"
    )
    full_size: int = option(
        "full-size", v.positive_int, "full KV pool slots per worker", default=32768, metavar="N"
    )
    swa_size: int = option(
        "swa-size", v.positive_int, "SWA KV pool slots per worker", default=8192, metavar="N"
    )
    device: str = option(
        "device", v.device, "torch device: cpu, cuda or cuda:N", default="cpu", metavar="DEV"
    )

    def __post_init__(self) -> None:
        for name, size in (("full_size", self.full_size), ("swa_size", self.swa_size)):
            if size % self.page_size:
                raise FieldError(name, f"{size} is not a multiple of the page size")


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
