"""Static checks of compose.yaml and the Dockerfile: services, images, env, healthchecks,
volumes, that every SWA_ES_* variable the stack sets is one the CLI knows, and that the stack's
Prometheus (docker/prometheus) scrapes every swa-es service with the alert rules of deploy/."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
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


KAFKA_NODES = ("kafka-1", "kafka-2", "kafka-3")


def test_all_services_exist(compose: dict[str, Any]) -> None:
    """Three Kafka nodes, one primary per worker and two followers."""
    assert set(compose["services"]) >= {*KAFKA_NODES, *SWA_SERVICES}


@pytest.mark.parametrize("name", KAFKA_NODES)
def test_kafka_nodes_form_a_replicated_kraft_cluster(compose: dict[str, Any], name: str) -> None:
    """Each node runs the pinned apache/kafka image by default (or the locally built one), is
    broker and controller of a 3-voter quorum, replicates topics 3 times with 2 in sync, and
    publishes its host listener on 127.0.0.1 only."""
    kafka = compose["services"][name]
    assert re.fullmatch(r"\$\{SWA_ES_KAFKA_IMAGE:-apache/kafka:\d+\.\d+\.\d+\}", kafka["image"])
    env = kafka["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"]
    assert len(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == 3
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3 and env["KAFKA_MIN_INSYNC_REPLICAS"] == 2
    assert kafka["healthcheck"]["test"]
    assert any(v.startswith(f"{name}-data:") for v in kafka["volumes"])
    assert all(p.startswith("127.0.0.1:") for p in kafka["ports"])


@pytest.mark.parametrize("name", sorted(SWA_SERVICES))
def test_swa_services_run_the_image_with_known_settings(compose: dict[str, Any], name: str) -> None:
    """Each swa-es service runs its command from the local image, waits for healthy brokers,
    has an HTTP healthcheck and a data volume, publishes on 127.0.0.1 only, and sets only
    variables the CLI knows."""
    service = compose["services"][name]
    command = SWA_SERVICES[name]
    assert service["image"] == "${SWA_ES_IMAGE:-swa-es:local}"
    assert service["build"]["context"] == "."
    assert service["command"] == [command]
    for node in KAFKA_NODES:
        assert service["depends_on"][node]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(service["healthcheck"]["test"])
    assert any(v.endswith(":/data") for v in service["volumes"])
    assert all(p.startswith("127.0.0.1:") for p in service["ports"])
    env = service["environment"]
    assert env["SWA_ES_LOG"].startswith("kafka://kafka-1:")
    assert "replication_factor=3&min_insync_replicas=2" in env["SWA_ES_LOG"]
    assert env["SWA_ES_METRICS_PORT"] == "9100"
    unknown = set(env) - known_variables(command)
    assert not unknown, f"{name} sets variables swa-es {command} does not read: {unknown}"


def test_primaries_have_distinct_sources_and_followers_snapshot(compose: dict[str, Any]) -> None:
    """Every primary publishes under its own source id; every follower keeps snapshots and
    serves the routing API."""
    services = compose["services"]
    sources = [services[n]["environment"]["SWA_ES_SOURCE"] for n in ("primary-0", "primary-1")]
    assert len(set(sources)) == 2
    for name in ("follower-a", "follower-b"):
        assert services[name]["environment"]["SWA_ES_SNAPSHOTS"].startswith("/data/")
        assert services[name]["environment"]["SWA_ES_HTTP_PORT"]
    logs = {services[n]["environment"]["SWA_ES_LOG"] for n in SWA_SERVICES}
    assert len(logs) == 1, "primaries and followers must share one topic"


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    """Every named volume a service mounts is declared at the top level."""
    declared = set(compose["volumes"])
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith(("/", ".")):
                assert source in declared, f"{name} mounts undeclared volume {source}"


def test_dockerfile_installs_the_host_made_wheelhouse_and_runs_swa_es() -> None:
    """The image's base is a build argument (the official Python image by default), it installs
    the wheelhouse tools/compose.sh makes without any index, and its entry point is swa-es."""
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "ARG BASE_IMAGE=python:3.11-slim" in text
    assert "FROM ${BASE_IMAGE}" in text
    assert text.count("pip install --no-index --no-deps") == 2
    assert "source=.compose/wheelhouse/project" in text
    assert 'ENTRYPOINT ["swa-es"]' in text


def test_bridge_service_reads_the_sglang_engine_with_known_settings(
    compose: dict[str, Any],
) -> None:
    """The bridge (profile sglang) subscribes to the sglang engine's PUB and replay endpoints,
    appends to the stack's topic, and sets only variables ``swa-es bridge`` reads."""
    bridge = compose["services"]["bridge"]
    assert bridge["profiles"] == ["sglang"] and bridge["command"] == ["bridge"]
    env = bridge["environment"]
    assert env["SWA_ES_ZMQ"].startswith("tcp://sglang-engine:")
    assert env["SWA_ES_REPLAY"].startswith("tcp://sglang-engine:")
    assert env["SWA_ES_LOG"] == compose["services"]["primary-0"]["environment"]["SWA_ES_LOG"]
    unknown = set(env) - known_variables("bridge")
    assert not unknown, f"bridge sets variables swa-es bridge does not read: {unknown}"


PROMETHEUS_DIR = ROOT / "docker" / "prometheus"
DEPLOY_PROMETHEUS = ROOT / "deploy" / "prometheus"
JOB_OF_COMMAND = {"serve": "swa-es-serve", "follow": "swa-es-follow", "bridge": "swa-es-bridge"}
"""The scrape job of each swa-es command: deploy/prometheus/prometheus.yml's job names."""


def bind_mounts(service: dict[str, Any]) -> dict[str, tuple[Path, str]]:
    """Container path -> (host path, options) of a service's bind mounts (``./HOST:PATH:OPT``)."""
    mounts = {}
    for volume in service.get("volumes", []):
        host, target, *options = volume.split(":")
        if host.startswith("."):
            mounts[target] = ((ROOT / host).resolve(), ",".join(options))
    return mounts


def prometheus_flag(flag: str) -> str:
    """The value of ``--FLAG=VALUE`` in docker/prometheus/Dockerfile's entry point."""
    entrypoint = re.search(
        r"^ENTRYPOINT (\[.*\])$", (PROMETHEUS_DIR / "Dockerfile").read_text(), re.M
    )
    assert entrypoint is not None, "docker/prometheus/Dockerfile has no ENTRYPOINT"
    for arg in json.loads(entrypoint.group(1)):
        if arg.startswith(f"--{flag}="):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"docker/prometheus/Dockerfile's entry point sets no --{flag}")


def test_prometheus_service_runs_debians_package_on_the_stacks_base(
    compose: dict[str, Any],
) -> None:
    """The prometheus service runs an image of Debian's package built on the swa-es image's
    base, starts with the stack (no profile), publishes on 127.0.0.1 only and is healthy once
    Prometheus says it is ready."""
    service = compose["services"]["prometheus"]
    swa_es = compose["services"]["primary-0"]
    assert service["image"] == "swa-es-prometheus:local"
    assert service["build"]["context"] == "docker/prometheus"
    assert service["build"]["args"]["BASE_IMAGE"] == swa_es["build"]["args"]["BASE_IMAGE"]
    dockerfile = (PROMETHEUS_DIR / "Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE}" in dockerfile
    assert "apt-get install -y --no-install-recommends prometheus" in dockerfile
    assert "profiles" not in service
    assert service["ports"] and all(p.startswith("127.0.0.1:") for p in service["ports"])
    port = prometheus_flag("web.listen-address").rsplit(":", 1)[1]
    assert any(p.endswith(f":{port}") for p in service["ports"])
    assert f"/dev/tcp/127.0.0.1/{port}" in " ".join(service["healthcheck"]["test"])
    assert "/-/ready" in " ".join(service["healthcheck"]["test"])


def test_prometheus_loads_the_scrape_config_and_the_operators_alert_rules(
    compose: dict[str, Any],
) -> None:
    """The config the entry point names is docker/prometheus/prometheus.yml, and each rule file
    it loads is mounted, read-only, from deploy/prometheus (the file operators get)."""
    mounts = bind_mounts(compose["services"]["prometheus"])
    config_path = prometheus_flag("config.file")
    assert mounts[config_path] == ((PROMETHEUS_DIR / "prometheus.yml").resolve(), "ro")
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    rule_files = config["rule_files"]
    assert (
        rule_files
        == yaml.safe_load((DEPLOY_PROMETHEUS / "prometheus.yml").read_text())["rule_files"]
    )
    for rule_file in rule_files:
        in_container = str(PurePosixPath(config_path).parent / rule_file)
        assert mounts[in_container] == ((DEPLOY_PROMETHEUS / rule_file).resolve(), "ro")


def test_prometheus_scrapes_every_swa_es_service(compose: dict[str, Any]) -> None:
    """Each swa-es service is a target of its command's job (the job names of
    deploy/prometheus/prometheus.yml, so the alert rules apply): a follower on its routing
    port, a primary and the bridge on their metrics port (the bridge found by DNS, a target
    only while it runs); every target is a service of the stack."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    deploy = yaml.safe_load((DEPLOY_PROMETHEUS / "prometheus.yml").read_text())
    assert set(jobs) == {job["job_name"] for job in deploy["scrape_configs"]}
    static = {
        job_name: {t for group in job.get("static_configs", []) for t in group["targets"]}
        for job_name, job in jobs.items()
    }
    by_dns = {
        job_name: {(n, sd["port"]) for sd in job.get("dns_sd_configs", []) for n in sd["names"]}
        for job_name, job in jobs.items()
    }
    expected: dict[str, set[str]] = {job: set() for job in jobs}
    for name, service in compose["services"].items():
        if service.get("image") != "${SWA_ES_IMAGE:-swa-es:local}":
            continue
        (command,) = service["command"]
        env = service["environment"]
        job = JOB_OF_COMMAND[command]
        if command == "follow":
            expected[job].add(f"{name}:{env['SWA_ES_HTTP_PORT']}")
        elif "profiles" in service:
            assert (name, int(env["SWA_ES_METRICS_PORT"])) in by_dns[job], (name, by_dns)
        else:
            expected[job].add(f"{name}:{env['SWA_ES_METRICS_PORT']}")
    assert static == expected


def test_promtool_accepts_the_stacks_prometheus_config(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """``promtool check config`` (rules included) on the files laid out as the container sees
    them (Debian's promtool; CI installs it)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        reason = "promtool not installed (Debian: apt-get install prometheus)"
        if os.environ.get("SWA_ES_REQUIRE_PROMTOOL") == "1":
            pytest.fail(f"SWA_ES_REQUIRE_PROMTOOL=1 but {reason}")
        pytest.skip(reason)
    for target, (host, _) in bind_mounts(compose["services"]["prometheus"]).items():
        laid_out = tmp_path / target.lstrip("/")
        laid_out.parent.mkdir(parents=True, exist_ok=True)
        laid_out.write_bytes(host.read_bytes())
    config = tmp_path / prometheus_flag("config.file").lstrip("/")
    done = subprocess.run(
        [promtool, "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
