"""One pool of pages, each named by its first slot, handed out from a tensor free list.

Pages ``1..num_pages`` (page 0 is reserved padding) are stored as their first slot
``page * page_size``, so neither allocation nor freeing ever divides. Freed pages are queued and
merged into the free list only when an allocation needs them.
"""

from __future__ import annotations

import torch


class PagePool:
    """A free list of first slots with a queue of pending frees and an exact Python count."""

    __slots__ = ("_available", "_device", "_free", "_num_pages", "_page_size", "_pending")

    def __init__(self, num_pages: int, page_size: int, device: torch.device) -> None:
        self._num_pages = num_pages
        self._page_size = page_size
        self._device = device
        self._free = torch.arange(1, num_pages + 1, dtype=torch.int64, device=device) * page_size
        self._pending: list[torch.Tensor] = []
        self._available = num_pages

    @property
    def available_pages(self) -> int:
        """Pages that can be taken now (free list plus queued frees)."""
        return self._available

    def take(self, count: int) -> torch.Tensor:
        """Remove and return the first slots of ``count`` free pages (caller checked the count)."""
        if count > self._free.numel():
            self._pending.insert(0, self._free)
            self._free = torch.cat(self._pending)
            self._pending = []
        pages = self._free[:count]
        self._free = self._free[count:]
        self._available -= count
        return pages

    def put(self, first_slots: torch.Tensor) -> None:
        """Queue pages (by first slot) that became free."""
        if first_slots.numel():
            self._pending.append(first_slots)
            self._available += first_slots.numel()

    def held_mask(self) -> torch.Tensor:
        """Boolean mask over page numbers ``0..num_pages``: True where the page is allocated."""
        held = torch.ones(self._num_pages + 1, dtype=torch.bool, device=self._device)
        held[0] = False
        for part in (self._free, *self._pending):
            held[part // self._page_size] = False
        return held

    def sanity_check(self, name: str) -> None:
        """Raise AssertionError on duplicate, reserved, misaligned or out-of-range free pages."""
        free = torch.cat([self._free, *self._pending])
        if free.numel() != self._available:
            raise AssertionError(
                f"{name} pool: {free.numel()} free pages, counted {self._available}"
            )
        if bool((free % self._page_size != 0).any()):
            raise AssertionError(f"{name} pool: a free slot is not the start of a page")
        pages = free // self._page_size
        if pages.numel() and (int(pages.min()) < 1 or int(pages.max()) > self._num_pages):
            raise AssertionError(f"{name} pool: a free page is outside 1..{self._num_pages}")
        if torch.unique(pages).numel() != pages.numel():
            raise AssertionError(f"{name} pool: a page is free twice")
