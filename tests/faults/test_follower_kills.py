"""Fault loop: ``swa-es follow`` SIGKILLed over and over while a primary keeps publishing.

The primary is a real cache and ``Publisher`` in this process, writing a FileLog. Each round
starts a follower process (snapshots every 20 batches) and waits until it has restored and
caught up: its replica digest must equal the primary's, and it must have read fewer records
than a full replay would (from the second round on, once a snapshot exists). Then the primary
serves more while the follower applies them live, and the follower is SIGKILLed at a random
moment (mid-apply or mid-snapshot); in about one round in five it is killed while still
restoring instead. A last follower must converge and stop cleanly.

CI runs 8 rounds; ``SWA_ES_FAULT_ROUNDS=100`` runs the full 100.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from log.file import FileLog
from swa_es import Publisher
from tests.compose.services import STARTUP_TIMEOUT_S, Service, follow_service
from tests.faults.cache_driver import CacheDriver, CacheShape
from tests.faults.knobs import fault_rounds, seed

CI_ROUNDS = 8
ROUNDS = fault_rounds(CI_ROUNDS)
SOURCE = "worker-0"


async def _serve(driver: CacheDriver, pub: Publisher, requests: int) -> None:
    for _ in range(requests):
        driver.serve()
        pub.step()
        await anyio.sleep(0.001)
    await pub.flush()


async def _wait_for(
    service: Service, what: str, predicate: Any, timeout_s: float
) -> dict[str, Any]:
    """Poll the service's status without blocking the event loop (the primary runs in it)."""
    with anyio.fail_after(timeout_s):
        while True:
            status = service.status()
            if status is not None and predicate(status):
                return status
            if service.process is not None and service.process.poll() is not None:
                raise AssertionError(
                    f"{service.name} exited before {what}:\n{service.stderr_tail()}"
                )
            await anyio.sleep(0.05)


def _caught_up(end: int, digest: str) -> Any:
    def check(status: dict[str, Any]) -> bool:
        replica = status.get("replicas", {}).get(SOURCE)
        return (
            bool(status["restored"])
            and status["position"].get("0") == end
            and replica is not None
            and replica["digest"] == digest
            and replica["diverged"] is None
        )

    return check


@pytest.mark.slow
@pytest.mark.timeout(300 + 20 * ROUNDS)
async def test_follower_sigkilled_restores_equal_and_reads_less(tmp_path: Path) -> None:
    """Every restore equals the primary and (once a snapshot exists) reads less than a full
    replay; SIGKILLs land during restore, live apply and snapshot writes."""
    run_seed = seed()
    rng = random.Random(run_seed)
    driver = CacheDriver(rng, CacheShape(page_size=4, window=8, full_size=4096, swa_size=1024))
    log_dir = tmp_path / "log"
    started = time.monotonic()
    read_fractions: list[float] = []
    killed_restoring = killed_live = restores = 0
    extra = ("--snapshot-every-batches", "20", "--keep-snapshots", "2")
    async with await FileLog.open(log_dir) as log, Publisher(driver.cache, log, SOURCE) as pub:
        await _serve(driver, pub, 150)
        for round_number in range(ROUNDS + 1):
            last = round_number == ROUNDS
            snapshots_there = any((tmp_path / "snapshots-k").glob("snapshot-*.swasnap"))
            follower = follow_service(tmp_path, log_dir.as_uri(), "k", *extra).start()
            try:
                if not last and rng.random() < 0.2:
                    await anyio.sleep(rng.uniform(0.0, 0.6))
                    follower.kill()
                    killed_restoring += 1
                    continue
                end = (await log.end()).get(0)
                status = await _wait_for(
                    follower,
                    f"a restore equal to the primary at offset {end}",
                    _caught_up(end, driver.cache.state_digest()),
                    STARTUP_TIMEOUT_S,
                )
                restores += 1
                metrics = status["metrics"]
                assert metrics["divergences"] == 0 and metrics["digest_mismatches"] == 0, metrics
                if snapshots_there:
                    assert metrics["restored_generation"] is not None, "no snapshot restored"
                    assert metrics["records_read"] < end, (metrics["records_read"], end)
                    read_fractions.append(metrics["records_read"] / end)
                if last:
                    assert follower.stop() == 0, follower.stderr_tail()
                    break
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_serve, driver, pub, rng.randint(20, 120))
                    await anyio.sleep(rng.uniform(0.05, 1.0))
                    follower.kill()
                    killed_live += 1
            finally:
                follower.close()
    assert killed_restoring + killed_live == ROUNDS
    assert len(read_fractions) >= ROUNDS // 2
    print(
        f"follower kill loop (seed {run_seed}): {ROUNDS} SIGKILLs ({killed_restoring} while "
        f"restoring, {killed_live} while applying live), {restores} restores equal to the "
        f"primary, {len(read_fractions)} of them from a snapshot, median restore read "
        f"{sorted(read_fractions)[len(read_fractions) // 2]:.1%} of the log, "
        f"{time.monotonic() - started:.0f} s"
    )
