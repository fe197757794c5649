"""``swa-es follow``'s ZMQ sockets are secure by default: a bind reachable beyond this host
without CURVE is refused at start with an error naming the flag (unless ``--zmq-insecure``,
then a warning line), and a real ``swa-es follow`` with ``--zmq-curve-secret-key-file`` and
``--zmq-curve-clients`` serves a listed client's replay and nothing to an unlisted one."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest
import zmq
import zmq.auth

from swa_es.bridge.wire import END_SEQ, decode_seq, encode_seq
from swa_es.cli.exit_codes import EXIT_USAGE
from swa_es.cli.main import main
from tests.bridge.waiting import free_port
from tests.swa_es.cli_process import CliProcess


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FileLog with one source's batches, written by ``swa-es serve``."""
    directory = tmp_path_factory.mktemp("zmq") / "log"
    assert main(["serve", "--log", str(directory), "--requests", "10", "--window", "64"]) == 0
    return directory


def last_error(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("flag", "endpoints"),
    [
        ("--zmq-publish", ["--zmq-publish", "tcp://*:{port}"]),
        ("--zmq-publish", ["--zmq-publish", "tcp://0.0.0.0:{port}"]),
        (
            "--zmq-replay",
            ["--zmq-publish", "ipc://{tmp}/pub", "--zmq-replay", "tcp://192.0.2.1:{port}"],
        ),
        (
            "--zmq-snapshot",
            ["--zmq-publish", "tcp://127.0.0.1:{port}", "--zmq-snapshot", "tcp://[::]:{port}"],
        ),
    ],
)
def test_a_plain_socket_beyond_the_host_is_refused_naming_the_flag(
    log_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    endpoints: list[str],
) -> None:
    given = [e.format(port=free_port(), tmp=tmp_path) for e in endpoints]
    assert main(["follow", "--log", str(log_dir), *given]) == EXIT_USAGE
    line = last_error(capsys)
    assert line.startswith(f"swa-es follow: error: {flag}: "), line
    assert "--zmq-insecure" in line and "--zmq-curve-secret-key-file" in line, line


def test_insecure_is_allowed_when_asked_with_a_warning(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"tcp://*:{free_port()}"
    argv = ["follow", "--log", str(log_dir), "--zmq-publish", endpoint, "--zmq-insecure"]
    assert main([*argv, "--duration-s", "0.2"]) == 0
    err = capsys.readouterr().err
    assert "warning: --zmq-publish binds beyond this host without CURVE" in err, err


def test_curve_options_go_together_and_name_a_bad_key(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["follow", "--log", str(log_dir), "--zmq-publish", f"tcp://127.0.0.1:{free_port()}"]
    assert main([*argv, "--zmq-curve-clients", str(tmp_path)]) == EXIT_USAGE
    line = last_error(capsys)
    assert line.startswith("swa-es follow: error: --zmq-curve-clients: needs"), line
    public, _ = zmq.auth.create_certificates(tmp_path, "server")
    given = ["--zmq-curve-clients", str(tmp_path), "--zmq-curve-secret-key-file", public]
    assert main([*argv, *given]) == EXIT_USAGE
    line = last_error(capsys)
    assert line.startswith(f"swa-es follow: error: --zmq-curve-secret-key-file {public}: "), line
    assert "public key only" in line, line


def replay(
    context: zmq.Context[zmq.Socket[bytes]],
    endpoint: str,
    server_key: bytes,
    pair: tuple[bytes, bytes],
    timeout_ms: int,
) -> list[int] | None:
    """The seqs a replay from 0 answers to a CURVE client with key ``pair`` (None: nothing
    within ``timeout_ms``)."""
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
    socket.curve_serverkey = server_key
    socket.curve_publickey, socket.curve_secretkey = pair
    socket.connect(endpoint)
    socket.send_multipart([b"", encode_seq(0)])
    seqs: list[int] = []
    try:
        while True:
            parts = socket.recv_multipart()
            seq = decode_seq(parts[1])
            if seq == END_SEQ:
                return seqs
            seqs.append(seq)
    except zmq.Again:
        return None
    finally:
        socket.close(linger=0)


def test_a_curve_follower_serves_listed_clients_only(log_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "clients").mkdir()
    server_public, server_secret = zmq.auth.create_certificates(tmp_path / "keys", "server")
    client_public, _ = zmq.auth.create_certificates(tmp_path / "clients", "client")
    server = zmq.auth.load_certificate(server_public)[0]
    listed = zmq.auth.load_certificate(Path(client_public).with_suffix(".key_secret"))
    unlisted = zmq.curve_keypair()
    replay_endpoint = f"tcp://127.0.0.1:{free_port()}"
    follow = CliProcess(
        *("follow", "--log", str(log_dir)),
        *("--zmq-publish", f"tcp://127.0.0.1:{free_port()}", "--zmq-replay", replay_endpoint),
        *("--zmq-curve-secret-key-file", server_secret, "--zmq-curve-clients"),
        *(str(tmp_path / "clients"), "--metrics-port", "0", "--http-port", "0"),  # uvloop
    )
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        start = follow.wait_for_line(lambda line: "metrics on " in line)
        metrics = re.search(r"metrics on (http://\S+?)(?:;|$)", start)
        assert metrics is not None, start
        follow.wait_for_line(lambda line: "ready: following" in line)
        secret = listed[1]
        assert secret is not None
        served = replay(context, replay_endpoint, server, (listed[0], secret), 30_000)
        assert served is not None and served[0] == 0, follow.text()  # the follower's state
        assert replay(context, replay_endpoint, server, unlisted, 1000) is None
        scraped = httpx.get(f"{metrics.group(1)}/metrics", timeout=10).text
        assert 'swa_es_zmq_refusals_total{reason="unlisted_key",socket="curve"}' in scraped
        (refused_line,) = [
            line for line in scraped.splitlines() if line.startswith("swa_es_zmq_refusals_total{")
        ]
        assert float(refused_line.split()[-1]) >= 1.0, refused_line
        assert follow.stop(signal.SIGTERM) == 0
    finally:
        follow.kill()
        context.destroy(linger=0)
