"""The error of the batch codec, shared by the native core's face and its pure-Python reference."""

from __future__ import annotations


class DecodeError(ValueError):
    """A record is not a valid event batch; ``field`` names the offending part (``""``: whole)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, str]]:
        return (type(self), (self.field, self.reason))
