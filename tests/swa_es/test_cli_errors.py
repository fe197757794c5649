"""CLI error paths: one clear line on stderr and the documented exit status, never a traceback."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
import torch

from swa_es.cli import EXIT_FAILED, EXIT_USAGE, main
from tests.compose.services import STARTUP_TIMEOUT_S, serve_service, swa_es_command

COMMANDS = ["demo", "serve", "follow", "inspect", "route", "snapshot", "restore", "bench"]


def one_line(err: str) -> str:
    """The single error line of a failed command (fails if there is more)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``swa-es CMD --help`` prints usage and exits 0."""
    with pytest.raises(SystemExit) as caught:
        main([command, "--help"])
    assert caught.value.code == 0
    assert f"usage: swa-es {command}" in capsys.readouterr().out


def test_no_command_and_unknown_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """No command prints help with exit 2; an unknown flag is one line with exit 2."""
    assert main([]) == EXIT_USAGE
    capsys.readouterr()
    assert main(["demo", "--bogus"]) == EXIT_USAGE
    assert "unrecognized arguments: --bogus" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["inspect", "ftp://host/x"], "unknown log scheme 'ftp'"),
        (["inspect", "file://otherhost/x"], "local directory"),
        (["demo", "--workers", "zero"], "--workers: expected an integer"),
        (["route", "memory://x", "--tokens", "1,x"], "--tokens: expected an integer"),
        (["bench", "nope"], "unknown benchmark 'nope'"),
    ],
)
def test_bad_values_are_one_line_with_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad URL or value names itself on one line; exit status 2."""
    assert main(argv) == EXIT_USAGE
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"swa-es {argv[0]}: error:") and expected in line, line


def test_unreachable_broker_fails_clearly_within_the_timeout() -> None:
    """A broker nobody listens on: exit 1 with one line, bounded by --open-timeout."""
    argv = ["inspect", "kafka://127.0.0.1:1/swa-es-nowhere", "--open-timeout", "3"]
    result = subprocess.run(
        swa_es_command(*argv), capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == EXIT_FAILED
    line = one_line(result.stderr)
    assert line.startswith("swa-es inspect: error:") and "127.0.0.1:1" in line, line


def test_silent_broker_times_out_with_a_clear_line() -> None:
    """A port that accepts connections but never answers: exit 1 once --open-timeout passes."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        port = silent.getsockname()[1]
        argv = ["inspect", f"kafka://127.0.0.1:{port}/swa-es-silent", "--open-timeout", "2"]
        result = subprocess.run(
            swa_es_command(*argv), capture_output=True, text=True, timeout=120, check=False
        )
    assert result.returncode == EXIT_FAILED
    line = one_line(result.stderr)
    assert line.startswith("swa-es inspect: error:") and f"127.0.0.1:{port}" in line, line


@pytest.mark.slow
def test_a_locked_file_log_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second writer on a FileLog another ``serve`` holds gets one 'locked' line, exit 1."""
    log_url = (tmp_path / "log").as_uri()
    holder = serve_service(tmp_path, log_url, "worker-0", "--rate", "50").start()
    try:
        holder.wait_for("start", lambda s: s["requests"] > 0, STARTUP_TIMEOUT_S)
        assert main(["serve", "--log", log_url, "--requests", "1"]) == EXIT_FAILED
        line = one_line(capsys.readouterr().err)
        assert "locked" in line and str(tmp_path / "log") in line, line
    finally:
        holder.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asking for --device cuda where there is none: one line naming --device, exit 2."""
    argv = ["serve", "--log", str(tmp_path / "log"), "--device", "cuda", "--requests", "1"]
    assert main(argv) == EXIT_USAGE
    assert "--device: cuda requested but CUDA is not available" in one_line(capsys.readouterr().err)
