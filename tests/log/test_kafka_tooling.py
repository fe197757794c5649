"""The local-broker tooling agrees with itself: pinned versions match, bad arguments fail."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "tools" / "kafka" / "kafka.sh"


def test_compose_runs_the_kafka_version_the_pom_pins() -> None:
    """Every compose.yaml broker and compose.sh's official image run the pom's Kafka version."""
    pom = (REPO / "tools" / "kafka" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert match is not None
    official = f"apache/kafka:{match.group(1)}"
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    brokers = {name: s for name, s in compose["services"].items() if name.startswith("kafka-")}
    assert sorted(brokers) == ["kafka-1", "kafka-2", "kafka-3"]
    for name, service in brokers.items():
        assert service["image"] == f"${{SWA_ES_KAFKA_IMAGE:-{official}}}", name
        assert "healthcheck" in service, name
    compose_sh = (REPO / "tools" / "compose.sh").read_text()
    assert f'kafka_official="{official}"' in compose_sh
    dockerfile = (REPO / "docker" / "kafka" / "Dockerfile").read_text()
    assert f"Kafka {match.group(1)} broker" in dockerfile


def test_kafka_sh_refuses_bad_arguments() -> None:
    """kafka.sh exits non-zero with a message naming the bad option, and starts nothing."""
    for args, named in (
        (["start", "--nodes", "2"], "--nodes"),
        (["start", "--port", "80"], "--port"),
        (["start", "--bogus"], "--bogus"),
        (["explode"], "explode"),
    ):
        done = subprocess.run(
            [str(KAFKA_SH), *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode != 0
        assert named in done.stderr
        assert done.stdout == ""
