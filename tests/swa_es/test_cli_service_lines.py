"""``follow``, ``serve`` and ``bridge`` as real processes tell their operator on stderr what they
listen on (the bound ports, also for port 0), what they read and write, when ``follow`` is
restored and ready, and sum up on exit; SIGTERM exits 0, SIGINT (Ctrl-C) 130; a port or a
status file they cannot have is one error line naming the flag and the value."""

from __future__ import annotations

import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from swa_es.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, main
from tests.swa_es.cli_process import CliProcess

pytestmark = pytest.mark.slow

URL = re.compile(r"(routing API|metrics) on (http://127\.0\.0\.1:(\d+))")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FileLog with one source's batches, written by ``swa-es serve``."""
    directory = tmp_path_factory.mktemp("lines") / "log"
    assert main(["serve", "--log", str(directory), "--requests", "30", "--window", "64"]) == 0
    return directory


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other socket listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def served_urls(line: str) -> dict[str, str]:
    """``{"routing API": url, "metrics": url}`` as a start line names them."""
    return {name: url for name, url, _ in URL.findall(line)}


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, EXIT_OK), (signal.SIGINT, 130)])
def test_follow_says_where_it_listens_when_ready_and_sums_up(
    log_dir: Path, tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    """With port 0 for both servers the start line names the bound ports (which answer), the
    log and the store; then it says restored and ready; the signal gets a summary line and the
    exit status of the grammar (SIGTERM 0, SIGINT 130)."""
    store = tmp_path / "snaps"
    follow = CliProcess(
        "follow", "--log", str(log_dir), "--snapshots", str(store),
        "--http-port", "0", "--metrics-port", "0",
    )  # fmt: skip
    try:
        start = follow.wait_for_line(lambda line: "following " in line)
        assert start.startswith("swa-es follow: following " + log_dir.as_uri()), start
        assert f"snapshots in {store}" in start
        urls = served_urls(start)
        assert set(urls) == {"routing API", "metrics"}, start
        restored = follow.wait_for_line(lambda line: "restored" in line)
        assert "no snapshot" in restored and "replayed 32 records" in restored, restored
        follow.wait_for_line(lambda line: "ready" in line)
        assert httpx.get(urls["routing API"] + "/v1/sources", timeout=10).json()["sources"]
        assert httpx.get(urls["metrics"] + "/healthz", timeout=10).status_code == 200
        assert follow.stop(signum) == status, follow.text()
    finally:
        follow.kill()
    summary = follow.lines[-1]
    assert summary.startswith(f"swa-es follow: stopped ({signum.name}) after "), follow.text()
    assert "32 records read" in summary and "1 source (0 diverged)" in summary, summary


def test_serve_sums_up_and_exits_130_on_ctrl_c(tmp_path: Path) -> None:
    """serve says where it appends and its metrics address, and on SIGINT flushes, prints its
    result and a summary, and exits 130 (it exited 0 before)."""
    log_url = (tmp_path / "log").as_uri()
    serve = CliProcess("serve", "--log", log_url, "--rate", "50", "--metrics-port", "0")
    try:
        start = serve.wait_for_line(lambda line: "appending to" in line)
        assert f"serving as source worker-0, appending to {log_url}" in start
        assert set(served_urls(start)) == {"metrics"}, start
        assert serve.stop(signal.SIGINT) == EXIT_INTERRUPTED, serve.text()
    finally:
        serve.kill()
    assert serve.lines[-1].startswith("swa-es serve: stopped (SIGINT) after "), serve.text()
    assert "requests as worker-0" in serve.lines[-1]
    assert serve.stdout.startswith("serve worker-0: ")


def test_a_busy_port_names_the_flag_and_the_value(
    log_dir: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port already in use is one error line naming the flag, the port and the address,
    exit 1 ("Address already in use" alone named neither)."""
    argv = ["follow", "--log", str(log_dir), "--http-port", str(busy_port)]
    assert main(argv) == EXIT_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"swa-es follow: error: --http-port {busy_port}: address already in use "
        f"(127.0.0.1:{busy_port})"
    ), err
    argv = ["serve", "--log", str(log_dir.parent / "other"), "--metrics-port", str(busy_port)]
    assert main(argv) == EXIT_FAILED
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"swa-es serve: error: --metrics-port {busy_port}: address already")


def test_a_busy_zmq_endpoint_names_the_flag_and_the_value(
    log_dir: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stream-out endpoint already bound by another socket is one error line naming its
    flag and the endpoint, exit 1 (ZMQ's "Address already in use" alone named neither)."""
    endpoint = f"tcp://127.0.0.1:{busy_port}"
    endpoints = {
        "--zmq-publish": ["--zmq-publish", endpoint],
        "--zmq-replay": ["--zmq-publish", "tcp://127.0.0.1:0", "--zmq-replay", endpoint],
    }
    for flag, options in endpoints.items():
        assert main(["follow", "--log", str(log_dir), *options]) == EXIT_FAILED
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"swa-es follow: error: {flag} {endpoint}: "), line
        assert line.endswith(f"({endpoint})"), line


def test_a_status_file_that_cannot_be_written_names_the_flag(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A status file in a missing directory fails at start, naming --status-file and the
    path (it failed at the first write, with a bare FileNotFoundError)."""
    missing = tmp_path / "nowhere" / "status.json"
    argv = ["follow", "--log", str(log_dir), "--status-file", str(missing)]
    assert main(argv) == EXIT_FAILED
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (
        f"swa-es follow: error: --status-file {missing}: directory {missing.parent} does not exist"
    )


def test_a_snapshot_store_that_is_a_file_names_the_flag(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --snapshots directory under a file fails before following, naming --snapshots and
    the store (it failed at the first snapshot, with a bare NotADirectoryError)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = blocker / "snaps"
    assert main(["follow", "--log", str(log_dir), "--snapshots", str(store)]) == EXIT_FAILED
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"swa-es follow: error: --snapshots {store}: {blocker} is not a directory"
