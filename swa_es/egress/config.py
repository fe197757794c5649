"""The stream out's configuration: the engine wire format, what a tombstone becomes
(``TombstonePolicy``), ``EgressConfig``, whose fields declare ``follow``'s ``--zmq-*``
options, and ``ZmqServerSecurity``, CURVE on every ZMQ socket ``follow`` binds (with the rule
that refuses a plain socket reachable beyond the host: ``insecure_binds``). Free of pyzmq and
msgpack (the ``bridge`` extra), so that ``follow`` declares its options without them.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from swa_es.options import FieldError, option
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
    replay_max_records: int = option(
        "zmq-replay-max-records",
        v.positive_int,
        "largest replay served on --zmq-replay: a request from further back than N messages "
        "before the stream's head gets the end marker alone (counted; such a consumer should "
        "take a --zmq-snapshot)",
        default=100_000,
        metavar="N",
    )
    client_requests_per_s: float = option(
        "zmq-client-requests-per-s",
        v.positive_float,
        "replay and snapshot requests a client (its CURVE key, else its address) may make per "
        "second, in bursts of up to max(1, R); faster ones are refused (counted)",
        default=5.0,
        metavar="R",
    )
    snapshot_max_pending: int = option(
        "zmq-snapshot-max-pending",
        v.positive_int,
        "snapshot requests waiting to be answered on --zmq-snapshot; more are refused at once "
        "(counted)",
        default=4,
        metavar="N",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ZmqServerSecurity:
    """CURVE on every ZMQ socket ``follow`` binds (``--zmq-publish``, ``--zmq-replay``,
    ``--zmq-snapshot``): the server's key pair and the directory of client public keys that
    ZAP admits (both or neither). Without them a socket reachable beyond this host is refused
    unless ``insecure`` (``insecure_binds``)."""

    secret_key_file: Path | None = option(
        "zmq-curve-secret-key-file",
        v.path,
        "CURVE key pair of the follower's ZMQ sockets (a NAME.key_secret file as "
        "zmq.auth.create_certificates writes, or the z85 secret key alone); needs "
        "--zmq-curve-clients",
        default=None,
        metavar="PATH",
        shown_default="off",
    )
    clients: Path | None = option(
        "zmq-curve-clients",
        v.path,
        "directory of the public keys (NAME.key files) of the clients allowed on the "
        "follower's ZMQ sockets; re-read when it changes",
        default=None,
        metavar="DIR",
        shown_default="off",
    )
    insecure: bool = option(
        "zmq-insecure",
        v.boolean,
        "allow a ZMQ socket of the follower without CURVE on an address reachable beyond this "
        "host (anyone who connects reads the token ids); without it such a bind is refused",
        default=False,
    )

    def __post_init__(self) -> None:
        if (self.secret_key_file is None) != (self.clients is None):
            raise FieldError(
                "clients" if self.secret_key_file is None else "secret_key_file",
                "needs --zmq-curve-secret-key-file and --zmq-curve-clients together "
                "(the server's key pair, and the client keys it admits)",
            )

    @property
    def curve(self) -> bool:
        """Whether the sockets are CURVE servers."""
        return self.secret_key_file is not None


def is_local_endpoint(endpoint: str) -> bool:
    """Whether ``endpoint`` is reachable from this host only: ``ipc://``, or TCP on a loopback
    address (``127.x.x.x``, ``[::1]``, ``localhost``)."""
    if endpoint.startswith("ipc://"):
        return True
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint.removeprefix("tcp://").rpartition(":")[0]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # '*', an interface name or a host name: maybe beyond this host


def insecure_binds(endpoints: dict[str, str | None], security: ZmqServerSecurity) -> list[str]:
    """The flags of ``endpoints`` (flag -> endpoint) that bind a plain socket beyond this
    host: refused (``SettingError`` naming the first) unless ``security.insecure``, when they
    are returned for a warning."""
    if security.curve:
        return []
    exposed = [
        flag for flag, endpoint in endpoints.items() if endpoint and not is_local_endpoint(endpoint)
    ]
    if exposed and not security.insecure:
        flag = exposed[0]
        raise v.SettingError(
            flag,
            f"{endpoints[flag]} is reachable beyond this host and the socket has no CURVE: "
            "whoever connects reads the token ids (users' prompts). Give "
            "--zmq-curve-secret-key-file and --zmq-curve-clients, bind loopback or ipc://, or "
            "pass --zmq-insecure to accept it",
        )
    return exposed
