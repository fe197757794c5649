"""``serve`` and ``follow`` as processes on an embedded FileLog: metrics, kill and restart."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from swa_es.cli import main
from tests.compose import scenarios
from tests.compose.services import STARTUP_TIMEOUT_S, serve_service


@pytest.mark.slow
def test_follower_metrics_move_during_a_run(tmp_path: Path) -> None:
    """Two scrapes of the follower's /metrics during a run show the counters growing."""
    scenarios.metrics_move(tmp_path, (tmp_path / "log").as_uri())


@pytest.mark.slow
def test_killed_serve_and_follow_restart_and_still_match(tmp_path: Path) -> None:
    """SIGKILLed mid-run and restarted, the follower ends with the primary's final digest."""
    status = scenarios.kill_and_restart(tmp_path, (tmp_path / "log").as_uri())
    assert status["metrics"]["divergences"] == 0


@pytest.mark.slow
def test_sigterm_flushes_serve_and_its_digest_is_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM stops serve cleanly: exit 0, a flushed final status, and replaying the log
    gives exactly the digest that status reports."""
    log_url = (tmp_path / "log").as_uri()
    primary = serve_service(tmp_path, log_url, "worker-0", "--rate", "100").start()
    try:
        primary.wait_for("requests", lambda s: s["requests"] >= 20, STARTUP_TIMEOUT_S)
        assert primary.stop() == 0, primary.stderr_tail()
    finally:
        primary.close()
    final = primary.status()
    assert final is not None and final["flushed"]
    assert main(["restore", str(tmp_path / "log"), "--snapshots", str(tmp_path / "s")]) == 0
    restored = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert restored["sources"]["worker-0"]["digest"] == final["digest"]
