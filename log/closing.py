"""``ClosesOnExit``: the ``async with`` plumbing shared by every log (and log wrapper)."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class ClosesOnExit:
    """Makes an object with ``async close()`` an async context manager that closes on exit."""

    async def close(self) -> None:
        """Release the object's resources (subclasses implement it)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
