"""``swa-es demo`` end to end: real workers, a real log, a follower, verified digests."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.compose.services import swa_es_command

DEMO_TIMEOUT_S = 240


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the demo as a user would, capturing its output."""
    return subprocess.run(
        swa_es_command("demo", "--duration", "3", *args),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )


def assert_verified(result: subprocess.CompletedProcess[str], workers: int) -> None:
    """Exit 0, a 'yes' verification line per worker, and the restore check passed."""
    assert result.returncode == 0, result.stderr + result.stdout
    for index in range(workers):
        line = next(x for x in result.stdout.splitlines() if x.startswith(f"worker-{index}:"))
        assert line.endswith(": yes"), line
    assert "restore: a fresh follower" in result.stdout
    assert "digests match: yes" in result.stdout
    assert "route: the prefix index agrees" in result.stdout
    assert "sampled prompts: yes" in result.stdout
    assert "verified: all replicas equal their primaries" in result.stdout


def test_demo_on_a_file_log_verifies_every_worker(tmp_path: Path) -> None:
    """Two workers on the embedded FileLog: both replicas equal their primaries."""
    result = run_demo("--data", str(tmp_path), "--workers", "2")
    assert_verified(result, workers=2)
    assert (tmp_path / "log").is_dir()
    assert any((tmp_path / "snapshots").iterdir())


def test_demo_with_small_pages_and_a_window_off_the_page_grid(tmp_path: Path) -> None:
    """Page 4 and a window of 10 tokens (not a multiple of the page) verify too."""
    result = run_demo(
        "--data",
        str(tmp_path),
        "--workers",
        "3",
        "--page-size",
        "4",
        "--window",
        "10",
        "--seed",
        "7",
    )
    assert_verified(result, workers=3)


@pytest.mark.kafka
def test_demo_on_kafka_verifies_every_worker(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The same demo on the real Kafka broker, on a fresh topic."""
    topic = f"swa-es-demo-{uuid.uuid4().hex[:8]}"
    result = run_demo("--data", str(tmp_path), "--log", f"kafka://{kafka_bootstrap}/{topic}")
    assert_verified(result, workers=2)
