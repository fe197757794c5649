"""Static checks of compose.yaml and the Dockerfile: services, images, env, healthchecks,
volumes, and that every SWA_ES_* variable the stack sets is one the CLI knows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from swa_es.cli import build_parser
from swa_es.cli.settings import env_name

ROOT = Path(__file__).resolve().parents[1]
SWA_SERVICES = {
    "primary-0": "serve",
    "primary-1": "serve",
    "follower-a": "follow",
    "follower-b": "follow",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """compose.yaml, parsed (YAML merge keys resolved)."""
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def known_variables(command: str) -> set[str]:
    """The SWA_ES_* variables of every option of ``swa-es COMMAND``."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # argparse keeps them here
    options = sub.choices[command]._actions  # type: ignore[index]  # choices of a subparsers action
    names = {o.lstrip("-") for a in options for o in a.option_strings if o.startswith("--")}
    return {env_name(n) for n in names} | {
        env_name(a.dest) for a in options if not a.option_strings
    }


def test_all_services_exist(compose: dict[str, Any]) -> None:
    """Kafka, one primary per worker, two followers and the tests service."""
    assert set(compose["services"]) >= {"kafka", *SWA_SERVICES, "tests"}


def test_kafka_is_the_pinned_kraft_image(compose: dict[str, Any]) -> None:
    """The broker is apache/kafka with an explicit version, KRaft roles and a healthcheck."""
    kafka = compose["services"]["kafka"]
    assert re.fullmatch(r"apache/kafka:\d+\.\d+\.\d+", kafka["image"])
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]
    assert kafka["healthcheck"]["test"]
    assert any(v.startswith("kafka-data:") for v in kafka["volumes"])


@pytest.mark.parametrize("name", sorted(SWA_SERVICES))
def test_swa_services_run_the_image_with_known_settings(compose: dict[str, Any], name: str) -> None:
    """Each swa-es service runs its command from the local image, waits for a healthy broker,
    has an HTTP healthcheck and a data volume, and sets only variables the CLI knows."""
    service = compose["services"][name]
    command = SWA_SERVICES[name]
    assert service["image"] == "swa-es:local" and service["build"] == "."
    assert service["command"] == [command]
    assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(service["healthcheck"]["test"])
    assert any(v.endswith(":/data") for v in service["volumes"])
    env = service["environment"]
    assert env["SWA_ES_LOG"].startswith("kafka://kafka:")
    assert env["SWA_ES_METRICS_PORT"] == "9100"
    unknown = set(env) - known_variables(command)
    assert not unknown, f"{name} sets variables swa-es {command} does not read: {unknown}"


def test_primaries_have_distinct_sources_and_followers_snapshot(compose: dict[str, Any]) -> None:
    """Every primary publishes under its own source id; every follower keeps snapshots."""
    services = compose["services"]
    sources = [services[n]["environment"]["SWA_ES_SOURCE"] for n in ("primary-0", "primary-1")]
    assert len(set(sources)) == 2
    for name in ("follower-a", "follower-b"):
        assert services[name]["environment"]["SWA_ES_SNAPSHOTS"].startswith("/data/")
    logs = {services[n]["environment"]["SWA_ES_LOG"] for n in SWA_SERVICES}
    assert len(logs) == 1, "primaries and followers must share one topic"


def test_tests_service_runs_the_compose_tests_against_the_stack(compose: dict[str, Any]) -> None:
    """The tests service runs pytest -m compose with the broker and the stack's endpoints."""
    tests = compose["services"]["tests"]
    assert tests["entrypoint"][-2:] == ["-m", "pytest"]
    assert tests["command"][:2] == ["-m", "compose"]
    env = tests["environment"]
    assert env["SWA_ES_KAFKA"].startswith("kafka:")
    assert set(tests["depends_on"]) == set(SWA_SERVICES)
    for url in env["SWA_ES_STACK_FOLLOWERS"].split(",") + env["SWA_ES_STACK_PRIMARIES"].split(","):
        assert url.split("//")[1].split(":")[0] in compose["services"]


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    """Every named volume a service mounts is declared at the top level."""
    declared = set(compose["volumes"])
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith(("/", ".")):
                assert source in declared, f"{name} mounts undeclared volume {source}"


def test_dockerfile_installs_the_project_and_runs_swa_es() -> None:
    """The image builds the native core into a wheel, installs it with its dev extra, and its
    entry point is swa-es."""
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11" in text
    assert "COPY native ./native" in text and "maturin build --release" in text
    assert 'pip install "$(ls /wheels/swa_es-*.whl)[dev]"' in text
    assert 'ENTRYPOINT ["swa-es"]' in text
    for folder in ("swa_es", "cache", "log", "consumers", "tests"):
        assert f"COPY {folder} ./{folder}" in text
