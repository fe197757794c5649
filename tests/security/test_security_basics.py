"""Security basics: no code from data, bounded decoding, checked snapshots, loopback servers,
Kafka security options that reach every client, and data directories no other user can write.

Request-size limits on the HTTP endpoints are exercised over real sockets in
``tests/fuzz/test_http_fuzz.py`` (huge heads and bodies, slow clients).
"""

from __future__ import annotations

import ast
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import yaml

import consumers.snapshots.format as snapshot_store
from cache.events import encode_batch
from consumers import Follower, ReplicaSet, SnapshotError, SnapshotStore
from log import Position, open_log
from log.directories import DATA_DIRECTORY_MODE
from log.file import FileLog
from log.kafka import parse_options
from log.kafka.producer import producer_kwargs
from log.kafka.reader import consumer_kwargs
from swa_es.cli import bridge, follow, serve, settings
from swa_es.cli.follow import FollowConfig
from swa_es.service.log_access import open_reader
from tests.compose.services import STARTUP_TIMEOUT_S, Service
from tests.consumers.primary_model import PrimaryModel

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("swa_es", "cache", "log", "consumers")
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "jsonpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "__import__"}


def _product_files() -> Iterator[Path]:
    for package in PRODUCT_PACKAGES:
        yield from (REPO / package).rglob("*.py")


def test_no_pickle_eval_or_exec_anywhere_in_the_product() -> None:
    """No product module imports a code-loading serialiser or calls eval/exec/__import__, and
    no YAML is loaded unsafely; the native core carries no pickle codec either."""
    offences = []
    for path in _product_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names = {node.func.id} & FORBIDDEN_CALLS
            elif isinstance(node, ast.Attribute) and node.attr in ("load", "unsafe_load"):
                base = node.value
                names = {"yaml.load"} if isinstance(base, ast.Name) and base.id == "yaml" else set()
            else:
                continue
            for name in names & (FORBIDDEN_MODULES | FORBIDDEN_CALLS | {"yaml.load"}):
                offences.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert offences == []
    native = REPO / "native"
    if native.is_dir():
        for path in [*native.rglob("*.rs"), *native.rglob("Cargo.toml")]:
            assert "pickle" not in path.read_text().lower(), path


def test_decode_limits_are_configurable(tmp_path: Path) -> None:
    """A follower's ``max_record_bytes`` skips (and counts) bigger records; ``swa-es follow``
    sets it with --max-record-bytes or SWA_ES_MAX_RECORD_BYTES."""
    model = PrimaryModel("worker-0")
    small = encode_batch(model.start_epoch())
    big = encode_batch(model.batch(model.store(list(range(500)))))
    limit = len(small) + 10
    assert len(big) > limit

    async def replay() -> Follower:
        async with await open_log(tmp_path.as_uri()) as log:
            await log.append_batch([("worker-0", small), ("worker-0", big)])
            follower = Follower(log, [ReplicaSet()], max_record_bytes=limit)
            await follower.catch_up()
            return follower

    assert anyio.run(replay).metrics.undecodable == 1

    def follow_config(flags: dict[str, object], env: dict[str, str]) -> FollowConfig:
        config: FollowConfig = settings.build_config(follow.COMMAND, {"log": "x", **flags}, env)
        return config

    flags = follow_config({"max_record_bytes": "4096"}, {})
    env = follow_config({}, {"SWA_ES_MAX_RECORD_BYTES": "512"})
    default = follow_config({}, {})
    assert (flags.max_record_bytes, env.max_record_bytes) == (4096, 512)
    assert default.max_record_bytes == 16 * 1024 * 1024


def test_a_snapshot_checksum_is_verified_before_anything_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot with a bad checksum is refused as such; its manifest is never parsed."""
    store = SnapshotStore(tmp_path)
    info = anyio.run(store.write, Position.of({0: 3}), {}, {"v": b"view bytes"})
    data = bytearray(info.path.read_bytes())
    data[-5] ^= 0x01  # the last view byte: the manifest and its own checksum stay intact
    info.path.write_bytes(bytes(data))

    def refuse(_: bytes) -> object:
        raise AssertionError("parsed before the checksum was verified")

    monkeypatch.setattr(snapshot_store.orjson, "loads", refuse)
    with pytest.raises(SnapshotError, match="checksum mismatch"):
        snapshot_store.read_snapshot(info.path)


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port`` (from /proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_servers_bind_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    """``swa-es follow --metrics-port 0`` with no host listens on 127.0.0.1 only; serve, follow
    and bridge default to it, and so does the routing API; compose opts into 0.0.0.0 explicitly."""
    args = ["follow", "--log", (tmp_path / "log").as_uri(), "--create-log", "--metrics-port", "0"]
    service = Service("follow-bind", args, tmp_path / "status.json", tmp_path).start()
    try:
        status = service.wait_for(
            "an HTTP port", lambda s: bool(s.get("metrics_port")), STARTUP_TIMEOUT_S
        )
        assert _listening_addresses(int(status["metrics_port"])) == {"0100007F"}  # 127.0.0.1
    finally:
        service.close()
    follows = settings.build_config(follow.COMMAND, {"log": "x"}, {})
    serves = settings.build_config(serve.COMMAND, {"log": "x"}, {})
    bridge_flags = {"log": "x", "zmq": "tcp://127.0.0.1:5557", "source": "worker-0"}
    bridges = settings.build_config(bridge.COMMAND, bridge_flags, {})
    assert follows.metrics.host == serves.metrics.host == bridges.metrics.host == "127.0.0.1"
    assert follows.http_host == "127.0.0.1"
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert compose["x-swa-es-env"]["SWA_ES_METRICS_HOST"] == "0.0.0.0"


def test_kafka_sasl_and_ssl_options_reach_producer_and_consumer() -> None:
    """SASL_SSL options from the URL reach aiokafka's producer and consumer, with a TLS context
    that verifies the broker; docs/operations.md documents every option."""
    options = parse_options(
        "broker:9093",
        "/t",
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "svc",
            "sasl_plain_password": "s3cret",
        },
    )
    for kwargs in (producer_kwargs(options), consumer_kwargs(options)):
        assert kwargs["security_protocol"] == "SASL_SSL"
        assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
        assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("svc", "s3cret")
        context = kwargs["ssl_context"]
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert "s3cret" not in options.url
    operations = (REPO / "docs" / "operations.md").read_text()
    for name in (
        "security_protocol",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
    ):
        assert f"`{name}`" in operations, name


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Run with umask 000, so only the modes the code asks for protect what it creates."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _modes(root: Path, path: Path) -> dict[str, int]:
    modes = {}
    while path != root:
        modes[str(path.relative_to(root))] = path.stat().st_mode & 0o777
        path = path.parent
    return modes


@pytest.mark.usefixtures("open_umask")
def test_data_directories_are_created_without_world_write(tmp_path: Path) -> None:
    """Log directories (and their parents and pins), snapshot stores and a follower's log
    directory are created 0750 even under umask 000."""
    log_dir = tmp_path / "a" / "b" / "log"
    snap_dir = tmp_path / "s" / "t" / "snapshots"
    reader_dir = tmp_path / "r" / "log"

    async def create() -> None:
        async with await FileLog.open(log_dir) as log:
            await log.append("k", b"v")
            await log.pin("snapshots", Position.of({0: 0}))
        await SnapshotStore(snap_dir).write(Position.of({0: 1}), {}, {"v": b""})
        async with await open_reader(reader_dir.as_uri(), 10, create=True):
            pass

    anyio.run(create)
    modes = {
        **_modes(tmp_path, log_dir / "pins"),
        **_modes(tmp_path, snap_dir),
        **_modes(tmp_path, reader_dir),
    }
    assert modes and all(mode == DATA_DIRECTORY_MODE for mode in modes.values()), {
        name: oct(mode) for name, mode in modes.items()
    }
