"""The stream out's configuration: the engine wire format, what a tombstone becomes
(``TombstonePolicy``) and ``EgressConfig``, whose fields declare ``follow``'s ``--zmq-*``
options. Free of pyzmq and msgpack (the ``bridge`` extra), so that ``follow`` declares its options
without them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from swa_es.options import option
from swa_es.options import values as v


class EngineFormat(enum.StrEnum):
    """The wire format of the stream out."""

    SGLANG = "sglang"
    VLLM = "vllm"


class TombstonePolicy(enum.StrEnum):
    """What a ``BlockSWAEvicted`` becomes for a consumer that does not know SWA."""

    KEEP = "keep"
    REMOVE = "remove"
    GROUPS = "groups"
    EVENTS = "events"

    @property
    def needs_state(self) -> bool:
        """Whether encoding needs the run's ``ResidencyStream``."""
        return self in (TombstonePolicy.GROUPS, TombstonePolicy.EVENTS)


POLICY_FORMATS: dict[TombstonePolicy, EngineFormat] = {
    TombstonePolicy.GROUPS: EngineFormat.VLLM,
    TombstonePolicy.EVENTS: EngineFormat.SGLANG,
}
"""The one format each residency-carrying policy has a shape in."""


def policy_error(fmt: EngineFormat, tombstones: TombstonePolicy) -> str | None:
    """Why ``tombstones`` cannot be used with ``fmt`` (None: it can)."""
    needed = POLICY_FORMATS.get(tombstones)
    if needed is None or needed is fmt:
        return None
    return (
        f"tombstones {tombstones.value!r} has a shape in the {needed.value} format only, "
        f"not {fmt.value}"
    )


@dataclass(frozen=True, slots=True)
class EgressConfig:
    """Where and how the stream out is served (``follow``'s ``--zmq-*`` options)."""

    publish_endpoint: str = option(
        "zmq-publish",
        v.zmq_endpoint,
        "PUB endpoint to republish every source's batches on, in --zmq-format (topic = source)",
        metavar="ENDPOINT",
        shown_default="off",
    )
    replay_endpoint: str | None = option(
        "zmq-replay",
        v.zmq_endpoint,
        "ROUTER endpoint answering replay requests from the durable log",
        default=None,
        metavar="ENDPOINT",
        shown_default="off",
    )
    wire_format: EngineFormat | str = option(
        "zmq-format",
        v.member_of(EngineFormat),
        "wire format of the ZMQ stream out: sglang or vllm",
        default=EngineFormat.SGLANG,
        metavar="FMT",
    )
    tombstones: TombstonePolicy | str = option(
        "zmq-tombstones",
        v.member_of(TombstonePolicy),
        "what a tombstone (SWA KV freed, full KV kept) becomes on the ZMQ stream out: keep "
        "(nothing is sent; the block stays cached for the consumer, as sglang's own stream "
        "says), remove (BlockRemoved; a later SWA restore is not sent), groups (with "
        "--zmq-format vllm: a vLLM hybrid model's full-attention and sliding-window groups) "
        "or events (with --zmq-format sglang: swa-es's sglang SWA residency events)",
        default=TombstonePolicy.KEEP,
        metavar="MODE",
    )
