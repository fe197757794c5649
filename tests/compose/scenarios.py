"""The end-to-end scenarios of the compose stack, run against any log URL.

They drive ``swa-es serve`` and ``swa-es follow`` processes (``tests.compose.services``) the
way the compose services run, and check what their status files and ``/metrics`` say.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

from swa_es.testing.metrics import parse_samples
from tests.compose.services import STARTUP_TIMEOUT_S, Service, follow_service, serve_service

CONVERGE_TIMEOUT_S = 120.0


def scrape(status: dict[str, Any]) -> dict[str, float]:
    """The samples of the ``/metrics`` endpoint a status names."""
    url = f"http://127.0.0.1:{status['metrics_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return parse_samples(response.read().decode())


def applied(status: dict[str, Any]) -> int:
    """Batches a follower status says it applied."""
    return int(status["metrics"]["batches_applied"])


def replica_digest(status: dict[str, Any], source: str) -> str | None:
    """The digest a follower status reports for ``source``."""
    replica = status.get("replicas", {}).get(source)
    return None if replica is None else str(replica["digest"])


def wait_converged(follower: Service, primary_status: dict[str, Any]) -> dict[str, Any]:
    """Wait until the follower holds the primary's final digest, undiverged."""
    source, digest = primary_status["source"], primary_status["digest"]
    return follower.wait_for(
        f"replica digest {digest} of {source}",
        lambda s: replica_digest(s, source) == digest and s["replicas"][source]["diverged"] is None,
        CONVERGE_TIMEOUT_S,
    )


def final_primary_status(primary: Service) -> dict[str, Any]:
    """Wait for a primary with a request limit to finish; its final (flushed) status."""
    assert primary.wait(CONVERGE_TIMEOUT_S + STARTUP_TIMEOUT_S) == 0, primary.stderr_tail()
    status = primary.status()
    assert status is not None and status["flushed"], status
    return status


def metrics_move(workdir: Path, log_url: str) -> None:
    """While a primary serves, the follower's /metrics counters grow between two scrapes."""
    primary = serve_service(workdir, log_url, "worker-0", "--rate", "200").start()
    follower = follow_service(workdir, log_url, "a").start()
    try:
        status = follower.wait_for("applied batches", lambda s: applied(s) > 0, STARTUP_TIMEOUT_S)
        first = scrape(status)
        follower.wait_for(
            "more batches", lambda s: applied(s) > applied(status) + 5, CONVERGE_TIMEOUT_S
        )
        second = scrape(status)
        for name in (
            "swa_es_follower_batches_applied_total",
            "swa_es_follower_events_applied_total",
        ):
            assert second[name] > first[name] > 0, name
        assert second['swa_es_replica_blocks{source="worker-0"}'] > 0
        removed = [k for k in second if k.startswith("swa_es_replica_removed_total{")]
        assert all('medium="' in k and 'reason="' in k for k in removed), removed
        assert second["swa_es_follower_lag_records"] >= 0
        assert second["swa_es_follower_lag_seconds"] >= 0
        assert [v for k, v in second.items() if k.startswith("swa_es_build_info{")] == [1.0]
        primary_status = primary.wait_for(
            "metrics port", lambda s: bool(s["metrics_port"]), STARTUP_TIMEOUT_S
        )
        assert scrape(primary_status)['swa_es_primary_requests_total{source="worker-0"}'] > 0
    finally:
        primary.close()
        follower.close()


def kill_and_restart(workdir: Path, log_url: str) -> dict[str, Any]:
    """SIGKILL a primary and a follower mid-run, restart both: the follower still ends equal
    to the primary's final digest, restored from a snapshot. Returns the follower's status."""
    primary = serve_service(workdir, log_url, "worker-0", "--rate", "300")
    follower = follow_service(workdir, log_url, "a", "--snapshot-every-batches", "50")
    try:
        primary.start()
        follower.start()
        follower.wait_for(
            "a snapshot",
            lambda s: s["metrics"]["snapshots_written"] >= 2,
            STARTUP_TIMEOUT_S + CONVERGE_TIMEOUT_S,
        )
        primary.kill()
        follower.kill()
        primary.args += ["--requests", "400"]
        primary.start()
        follower.start()
        final = final_primary_status(primary)
        status = wait_converged(follower, final)
        assert status["metrics"]["restored_generation"] is not None, status["metrics"]
        assert follower.stop() == 0, follower.stderr_tail()
        return status
    finally:
        primary.close()
        follower.close()
