"""The local-broker tooling agrees with itself: pinned versions match, bad arguments fail."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "tools" / "kafka" / "kafka.sh"


def test_compose_runs_the_kafka_version_the_pom_pins() -> None:
    """compose.yaml's apache/kafka image has the same version as tools/kafka/pom.xml."""
    pom = (REPO / "tools" / "kafka" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert match is not None
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{match.group(1)}"
    assert "healthcheck" in compose["services"]["kafka"]


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
