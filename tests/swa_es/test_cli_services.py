"""``serve`` and ``follow`` as processes on an embedded FileLog: metrics, kill and restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compose import scenarios


@pytest.mark.slow
def test_follower_metrics_move_during_a_run(tmp_path: Path) -> None:
    """Two scrapes of the follower's /metrics during a run show the counters growing."""
    scenarios.metrics_move(tmp_path, (tmp_path / "log").as_uri())


@pytest.mark.slow
def test_killed_serve_and_follow_restart_and_still_match(tmp_path: Path) -> None:
    """SIGKILLed mid-run and restarted, the follower ends with the primary's final digest."""
    status = scenarios.kill_and_restart(tmp_path, (tmp_path / "log").as_uri())
    assert status["metrics"]["divergences"] == 0
