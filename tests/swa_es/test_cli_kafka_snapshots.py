"""``swa-es snapshot``, ``restore``, ``inspect`` and ``follow`` with ``--snapshots kafka://``:
a second router with an empty disk rebuilds a primary from the snapshot topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from swa_es.cli import main
from swa_es.engine.engine import CacheConfig, synthetic_engine
from tests.fixtures.kafka import fresh_topic

pytestmark = pytest.mark.kafka

REQUESTS = 20
CACHE = CacheConfig(full_size=32768, swa_size=8192, window_tokens=64, page_size=16, device="cpu")
CACHE_FLAGS = ["--window", "64", "--page-size", "16", "--seed", "5"]


def _lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.strip().splitlines() if line.startswith("{")]


def test_a_second_router_restores_from_the_snapshot_topic(
    kafka_bootstrap: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """serve -> snapshot (Kafka store) -> restore and follow elsewhere: same digest as the
    primary, the tail only replayed; inspect --verify-snapshots says the snapshot loads whole."""
    log = f"kafka://{kafka_bootstrap}/{fresh_topic(request)}"
    store = f"kafka://{kafka_bootstrap}/{fresh_topic(request)}-snap?group=routers"
    assert main(["serve", "--log", log, "--requests", str(REQUESTS), *CACHE_FLAGS]) == 0
    twin = synthetic_engine(CACHE, seed=5)
    for _ in range(REQUESTS):
        twin.step()
    capsys.readouterr()

    assert main(["snapshot", log, "--snapshots", store]) == 0
    (written,) = _lines(capsys.readouterr().out)
    assert written["snapshot"].startswith(f"kafka://{kafka_bootstrap}/")
    assert written["sources"]["worker-0"]["digest"] == twin.cache.state_digest()

    assert main(["restore", log, "--snapshots", store]) == 0
    (restored,) = _lines(capsys.readouterr().out)
    assert restored["snapshot"] == written["snapshot"]
    assert restored["records_replayed"] == 0
    assert restored["lost_history"] == {}
    assert restored["sources"] == written["sources"]

    assert main(["inspect", log, "--verify-snapshots", store]) == 0
    (listed,) = _lines(capsys.readouterr().out)
    assert listed["valid"] is True
    assert listed["log_holds_tail"] is True
    assert listed["digests"] == {"worker-0": twin.cache.state_digest()}

    status = tmp_path / "status.json"
    argv = ["follow", "--log", log, "--snapshots", store, "--duration", "1"]
    assert main([*argv, "--status-file", str(status)]) == 0
    report = orjson.loads(status.read_bytes())
    assert report["restored"] is True
    assert report["metrics"]["restored_generation"] == 1
    assert report["replicas"]["worker-0"]["digest"] == twin.cache.state_digest()
