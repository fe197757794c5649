"""The stream out's errors: ``EgressError``, the family, and ``TokenIdsWithheldError``, a source
whose writer withholds token ids (a token-free source) met by the stream out, which sends every
block's token ids."""

from __future__ import annotations

from cache.errors import SwaEsError


class EgressError(SwaEsError):
    """The stream out cannot run on this log (for example, several partitions)."""


class TokenIdsWithheldError(EgressError):
    """A batch of ``source`` whose writer withheld the token ids (``--no-token-ids``; ``reason``
    says how the batch shows it): the stream out sends each block's token ids, so it sends none
    of this source's blocks rather than blocks without them."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(
            f"source {source!r}: its writer withholds token ids (a token-free source, "
            f"--no-token-ids): {reason}; the stream out sends every block's token ids, so it "
            "sends none of this source's blocks"
        )
