"""Soak: the demo's workload at steady load, as processes: a ``swa-es serve`` worker paced at a
fixed request rate and a ``swa-es follow`` (with snapshots) on one FileLog (a FileLog has one
writer, so one worker; the follower runs in its own process so its memory can be measured).

Every 2 s the follower's resident memory (from /proc) and its lag and divergence counters (from
its status file) are sampled. The follower's RSS must be flat once the caches are warm (the
last sample within 16 MiB or 10% of the one taken a quarter of the way in), its lag bounded all
along, and no source may ever diverge; after the workers stop, the follower must hold both
primary's final digest.

CI runs 60 s; ``SWA_ES_SOAK_S=600`` runs the 10 minutes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.compose.scenarios import wait_converged
from tests.compose.services import STARTUP_TIMEOUT_S, Service, follow_service, serve_service
from tests.faults.knobs import soak_seconds
from tests.fuzz.http_client import rss_bytes

CI_SOAK_S = 60
SOAK_S = soak_seconds(CI_SOAK_S)
RATE_RPS = 100
SAMPLE_EVERY_S = 2.0
MAX_LAG_RECORDS = 10 * RATE_RPS  # ten seconds of the worker's batches (one per request)
FLAT_BYTES = 16 * 1024 * 1024
FLAT_FRACTION = 0.10


def _sample(
    follower: Service, samples: list[tuple[float, int, int, float, int]], t0: float
) -> None:
    assert follower.process is not None
    status = follower.status()
    if status is None:
        return
    metrics = status["metrics"]
    samples.append(
        (
            time.monotonic() - t0,
            rss_bytes(follower.process.pid),
            int(metrics["lag_records"]),
            float(metrics["lag_s"]),
            int(metrics["divergences"]),
        )
    )


@pytest.mark.slow
@pytest.mark.timeout(SOAK_S + 600)
def test_soak_follower_memory_flat_lag_bounded_no_divergence(tmp_path: Path) -> None:
    """Steady load for SWA_ES_SOAK_S seconds (60 in CI): flat follower RSS, bounded lag, 0
    divergences, and the follower ends equal to the primary."""
    log_url = (tmp_path / "log").as_uri()
    workers = [serve_service(tmp_path, log_url, "worker-0", "--rate", str(RATE_RPS))]
    follower = follow_service(tmp_path, log_url, "soak")
    samples: list[tuple[float, int, int, float, int]] = []
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.wait_for("serving", lambda s: s["requests"] > 0, STARTUP_TIMEOUT_S)
        follower.start()
        follower.wait_for("restored", lambda s: bool(s["restored"]), STARTUP_TIMEOUT_S)
        t0 = time.monotonic()
        while time.monotonic() - t0 < SOAK_S:
            time.sleep(SAMPLE_EVERY_S)
            _sample(follower, samples, t0)
            for worker in workers:
                assert worker.process is not None and worker.process.poll() is None, (
                    worker.stderr_tail()
                )
        finals = []
        for worker in workers:
            assert worker.stop() == 0, worker.stderr_tail()
            final = worker.status()
            assert final is not None and final["flushed"]
            finals.append(final)
        for final in finals:
            wait_converged(follower, final)
        end = follower.status()
        assert end is not None
        assert follower.stop() == 0, follower.stderr_tail()
    finally:
        for service in (*workers, follower):
            service.close()

    assert len(samples) >= SOAK_S / SAMPLE_EVERY_S / 2, "too few samples"
    quarter = next(s for s in samples if s[0] >= SOAK_S / 4)
    last = samples[-1]
    growth = last[1] - quarter[1]
    max_lag = max(s[2] for s in samples)
    max_lag_s = max(s[3] for s in samples)
    assert all(s[4] == 0 for s in samples), "a source diverged during the soak"
    assert end["metrics"]["divergences"] == 0 and end["metrics"]["digest_mismatches"] == 0
    assert max_lag <= MAX_LAG_RECORDS, f"lag reached {max_lag} records"
    assert growth <= max(FLAT_BYTES, FLAT_FRACTION * quarter[1]), (
        f"follower RSS grew {growth / 2**20:.1f} MiB from {quarter[0]:.0f} s to {last[0]:.0f} s"
    )
    mib = 2**20
    print(
        f"soak {SOAK_S} s at {RATE_RPS} req/s: follower RSS {samples[0][1] / mib:.1f} MiB at "
        f"{samples[0][0]:.0f} s, {quarter[1] / mib:.1f} MiB at {quarter[0]:.0f} s, "
        f"{last[1] / mib:.1f} MiB at {last[0]:.0f} s (growth {growth / mib:+.1f} MiB); lag max "
        f"{max_lag} records / {max_lag_s:.2f} s; {end['metrics']['batches_applied']} batches "
        f"applied, {end['metrics']['digests_checked']} digests checked, 0 divergences"
    )
