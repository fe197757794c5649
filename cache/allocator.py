"""The two-pool KV slot allocator: a full-attention pool and a sliding-window (SWA) pool.

Every full slot handed out is mapped to a fresh SWA slot; ``free_swa`` drops the SWA half while
the full slot stays allocated (a tombstoned tree node). Both pools are paged: a page is
``page_size`` consecutive slots and page 0 of each pool is reserved padding, so a pool of
``N`` slots hands out pages ``1..N // page_size`` (slots ``page_size .. N + page_size - 1``).

Free lists are int64 tensors of each page's first slot, on the device. Freed pages are queued and
merged into the free list only when an allocation needs them, so ``free`` costs one tensor append.
Availability is counted in Python ints from tensor shapes, so it never reads the device; only
``free`` without a residency hint reads the mapping.
"""

from __future__ import annotations

import torch

from cache.page_pool import PagePool


class SWAKVAllocator:
    """Full and SWA slot pools with a full → SWA index mapping, all int64 tensors on ``device``."""

    def __init__(
        self,
        full_size: int,
        swa_size: int,
        page_size: int = 1,
        device: str | torch.device = "cpu",
    ) -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        for name, size in (("full_size", full_size), ("swa_size", swa_size)):
            if size < 0 or size % page_size:
                raise ValueError(f"{name}={size} must be a non-negative multiple of {page_size=}")
        self._page_size = page_size
        # Resolved through a tensor so "cuda" becomes "cuda:0" and compares equal to tensors'.
        self._device = torch.empty(0, device=device).device
        self._full = PagePool(full_size // page_size, page_size, self._device)
        self._swa = PagePool(swa_size // page_size, page_size, self._device)
        self._full_size = full_size
        self._swa_size = swa_size
        self._offsets = torch.arange(page_size, dtype=torch.int64, device=self._device)
        self._full_to_swa = torch.zeros(
            full_size + page_size, dtype=torch.int64, device=self._device
        )

    # --- read-only configuration -----------------------------------------------------------

    @property
    def page_size(self) -> int:
        """Slots per page."""
        return self._page_size

    @property
    def device(self) -> torch.device:
        """The device every index tensor lives on."""
        return self._device

    @property
    def full_size(self) -> int:
        """Usable slots of the full pool (padding page excluded)."""
        return self._full_size

    @property
    def swa_size(self) -> int:
        """Usable slots of the SWA pool (padding page excluded)."""
        return self._swa_size

    def full_available_size(self) -> int:
        """Free slots of the full pool."""
        return self._full.available_pages * self._page_size

    def swa_available_size(self) -> int:
        """Free slots of the SWA pool."""
        return self._swa.available_pages * self._page_size

    # --- allocation -------------------------------------------------------------------------

    def alloc(self, n: int) -> torch.Tensor | None:
        """``n`` fresh full slots, each mapped to a fresh SWA slot; None when a pool is short."""
        if n < 0 or n % self._page_size:
            raise ValueError(f"alloc(n={n}): n must be a non-negative multiple of page_size")
        pages = n // self._page_size
        if pages > self._full.available_pages or pages > self._swa.available_pages:
            return None
        full = self._slots_of(self._full.take(pages))
        self._full_to_swa.index_copy_(0, full, self._slots_of(self._swa.take(pages)))
        return full

    def free(
        self,
        indices: torch.Tensor,
        *,
        swa_resident: bool | None = None,
        whole_pages: bool = False,
    ) -> None:
        """Return every page ``indices`` touch to the full pool, with the SWA pages mapped to them.

        A page is freed as a whole even when ``indices`` name only part of it, and once even
        when they name it twice (as sglang's paged allocator does): an engine frees a request's
        unaligned tail this way. ``swa_resident`` is a fast-path hint from a caller that knows
        the mapping: True means every page still has its SWA slots, False means none has; None
        (the default) reads the mapping. ``whole_pages=True`` promises ``indices`` are whole,
        distinct pages in slot order (a tree node's value), which skips finding the pages. A
        wrong hint or promise corrupts the accounting.
        """
        if indices.numel() == 0:
            return
        first = self._first_slots(indices, whole_pages)
        if swa_resident is not False:
            slots = indices if whole_pages else self._slots_of(first)
            self._release_swa(first, slots, checked=swa_resident is None)
        self._full.put(first)

    def free_swa(
        self,
        indices: torch.Tensor,
        *,
        swa_resident: bool | None = None,
        whole_pages: bool = False,
    ) -> None:
        """Return the SWA pages mapped to the full pages ``indices`` touch; keep the full ones.

        As in ``free``, a page is freed as a whole even when ``indices`` name part of it. The
        mapping of those pages is cleared; pages whose SWA is already free are skipped.
        ``swa_resident=True`` promises every page is still mapped and skips that check;
        ``whole_pages`` is ``free``'s promise.
        """
        if indices.numel() == 0 or swa_resident is False:
            return
        first = self._first_slots(indices, whole_pages)
        slots = indices if whole_pages else self._slots_of(first)
        self._release_swa(first, slots, checked=swa_resident is None)

    def move_swa(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Give the SWA slots of full slots ``src`` to full slots ``dst``, then free ``src``.

        ``dst`` must have no SWA mapped (a tombstoned node being restored) and ``src`` must be
        as ``alloc`` returned it (all mapped); both are whole pages of equal length.
        """
        if dst.numel() != src.numel():
            raise ValueError(f"move_swa: {dst.numel()} destination vs {src.numel()} source slots")
        if src.numel() == 0:
            return
        first = self._first_slots(src, whole_pages=True)
        mapping = self._full_to_swa
        mapping.index_copy_(0, dst, mapping.index_select(0, src))
        mapping.index_fill_(0, src, 0)
        self._full.put(first)

    def translate_full_to_swa(self, indices: torch.Tensor) -> torch.Tensor:
        """The SWA slot of each full slot (0 where its SWA has been freed)."""
        if indices.dim() == 1:
            return self._full_to_swa.index_select(0, indices)
        return self._full_to_swa[indices]

    # --- helpers ----------------------------------------------------------------------------

    def _slots_of(self, first: torch.Tensor) -> torch.Tensor:
        if self._page_size == 1:
            return first
        return (first[:, None] + self._offsets).reshape(-1)

    def _first_slots(self, indices: torch.Tensor, whole_pages: bool) -> torch.Tensor:
        """The first slot of each distinct page ``indices`` touch."""
        if indices.dim() != 1:
            raise ValueError(f"slot indices must be 1-D, got shape {tuple(indices.shape)}")
        page = self._page_size
        if page == 1:
            return indices
        if whole_pages:
            if indices.numel() % page:
                raise ValueError(
                    f"{indices.numel()} slots is not a whole number of pages of {page}"
                )
            return indices[::page]
        pages: torch.Tensor = torch.unique(torch.div(indices, page, rounding_mode="floor"))
        return pages * page

    def _release_swa(self, first: torch.Tensor, slots: torch.Tensor, *, checked: bool) -> None:
        """Free the SWA pages mapped to full pages ``first``; clear the mapping of ``slots``.

        ``slots`` are every slot of those pages.
        """
        swa_first = self._full_to_swa.index_select(0, first)
        if checked:
            mapped = swa_first != 0
            if not bool(mapped.all()):
                swa_first = swa_first[mapped]
        self._full_to_swa.index_fill_(0, slots, 0)
        self._swa.put(swa_first)

    # --- checks -----------------------------------------------------------------------------

    def held_masks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Boolean masks over full and SWA pages: True where the page is allocated (checks)."""
        return self._full.held_mask(), self._swa.held_mask()

    def sanity_check(self) -> None:
        """Raise AssertionError if the free lists or the mapping are inconsistent."""
        self._full.sanity_check("full")
        self._swa.sanity_check("swa")
        full_held, swa_held = self.held_masks()
        mapping = self._full_to_swa.view(-1, self._page_size)
        first = mapping[:, 0]
        if bool((first[~full_held] != 0).any()):
            raise AssertionError("a free full page still maps to an SWA page")
        mapped = first[first != 0]
        if self._page_size > 1:
            expected = mapped[:, None] + self._offsets
            if bool((mapped % self._page_size != 0).any()) or not torch.equal(
                mapping[first != 0], expected
            ):
                raise AssertionError("an SWA mapping does not cover whole pages")
        swa_pages = mapped // self._page_size
        if swa_pages.numel() != torch.unique(swa_pages).numel():
            raise AssertionError("two full pages map to the same SWA page")
        if int(swa_held.sum()) != swa_pages.numel() or not bool(swa_held[swa_pages].all()):
            raise AssertionError("allocated SWA pages differ from the mapped ones")
