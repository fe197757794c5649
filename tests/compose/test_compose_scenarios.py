"""The compose scenarios on Kafka, with serve/follow as subprocesses (no Docker needed).

In CI ``SWA_ES_KAFKA`` names the local broker from tools/kafka; inside the compose stack it
names the kafka service. Without a broker these tests skip (fail with SWA_ES_REQUIRE_KAFKA=1).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.compose import scenarios

pytestmark = [pytest.mark.compose, pytest.mark.kafka]


def fresh_topic_url(bootstrap: str, partitions: int = 2) -> str:
    """A KafkaLog URL on a topic no other test uses."""
    return f"kafka://{bootstrap}/swa-es-compose-{uuid.uuid4().hex[:10]}?partitions={partitions}"


@pytest.mark.slow
def test_metrics_move_during_a_run_on_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Scraped twice during a run, the follower's counters grow."""
    scenarios.metrics_move(tmp_path, fresh_topic_url(kafka_bootstrap))


@pytest.mark.slow
def test_kill_and_restart_on_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    """SIGKILLed serve and follow restart; the follower ends at the primary's final digest."""
    status = scenarios.kill_and_restart(tmp_path, fresh_topic_url(kafka_bootstrap))
    assert status["metrics"]["divergences"] == 0
