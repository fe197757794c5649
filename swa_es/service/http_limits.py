"""The bounds a service's HTTP server puts on its connections (``HttpLimits``) and their
defaults, declared here without the server so that the command line can show them.

The connection protocol that enforces them is ``http_protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

HEAD_TIMEOUT_S: Final = 10.0
"""How long a connection has to deliver a complete request head."""
BODY_TIMEOUT_S: Final = 10.0
"""How long a request's body may take to arrive after its head."""
KEEP_ALIVE_TIMEOUT_S: Final = 5.0
"""How long a connection may stay idle after a response."""
MAX_CONNECTIONS: Final = 512
"""How many connections a server keeps open at once."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The bounds a server puts on its connections (defaults: the module's constants)."""

    head_timeout_s: float = HEAD_TIMEOUT_S
    """A request head must be complete this long after the connection opened or the previous
    response ended; else 408 (nothing received yet: closed silently) and closed."""
    body_timeout_s: float = BODY_TIMEOUT_S
    """A request body must be complete this long after its head; else 408 and closed."""
    keep_alive_timeout_s: float = KEEP_ALIVE_TIMEOUT_S
    """A connection idle this long after a response is closed."""
    max_connections: int = MAX_CONNECTIONS
    """Connections open at once; one more is answered 503 and closed as it opens."""

    def __post_init__(self) -> None:
        for name in ("head_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"HttpLimits.{name} must be positive, not {getattr(self, name)}")
        if self.max_connections < 1:
            raise ValueError(
                f"HttpLimits.max_connections must be at least 1, not {self.max_connections}"
            )
