"""The cache settings ``demo`` and ``serve`` share, as a base of their config classes."""

from __future__ import annotations

from dataclasses import dataclass

from swa_es.cli.values import SettingError
from swa_es.engine.engine import CacheConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheOptions:
    """One primary's cache and workload settings (``--window``, ``--page-size``, ...)."""

    window_tokens: int
    page_size: int
    full_size: int
    swa_size: int
    device: str
    seed: int

    def __post_init__(self) -> None:
        for name, size in (("full-size", self.full_size), ("swa-size", self.swa_size)):
            if size % self.page_size:
                raise SettingError("--" + name, f"{size} is not a multiple of the page size")

    @property
    def cache(self) -> CacheConfig:
        """What the engine builds its cache from."""
        return CacheConfig(
            full_size=self.full_size,
            swa_size=self.swa_size,
            window_tokens=self.window_tokens,
            page_size=self.page_size,
            device=self.device,
        )
