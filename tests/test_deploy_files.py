"""The supervision files of deploy/ (docs/deploy.md) hold up: the systemd units have the sections
and keys a supervised service needs (and ``systemd-analyze verify`` finds nothing in them), every
``swa-es`` command they run parses with the real command-line parser and builds a valid config
from the variables they set (each ``SWA_ES_*`` one the command reads), and ports, endpoints and
source ids agree between the engine, its bridges, the followers and their probes and Services."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from swa_es.cli import build_parser, settings
from swa_es.cli.settings import ENV_PREFIX
from swa_es.service.http_auth import is_loopback

REPO = Path(__file__).resolve().parents[1]
SYSTEMD = REPO / "deploy" / "systemd"
KUBERNETES = REPO / "deploy" / "kubernetes"
ETC = "/etc/swa-es/"
"""Where the units read their EnvironmentFiles (deploy/systemd/NAME is installed as ETC/NAME)."""
RANKS = (0, 1)
"""The data-parallel ranks deploy/ ships a bridge example of."""
KV_EVENTS_PORT = 5557
REPLAY_PORT = 5657
BRIDGE_METRICS_PORT = 9200
"""Rank r's ports are these + r (docs/deploy.md, "Ports")."""
COMMAND_LINE = re.compile(r"^(?P<binary>\S*/swa-es)\s+(?P<args>.*)$")


# --- systemd -----------------------------------------------------------------------------------


def read_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections, each a list of (key, value) in order (keys may repeat, as
    ``EnvironmentFile`` does); continuation lines joined."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    text = re.sub(r"\\\n", " ", path.read_text())
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep, f"{path.name}:{number}: not a key=value in a section"
        current.append((key.strip(), value.strip()))
    return sections


def values(unit: Mapping[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    """Every value of ``key`` in ``section``."""
    return [value for k, value in unit.get(section, []) if k == key]


def read_env_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile's variables (the subset of its syntax deploy/ uses: KEY=VALUE lines,
    comments, no quotes)."""
    found: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), f"{path.name}:{number}: {line!r}"
        assert not value.startswith(("'", '"')), f"{path.name}:{number}: quoted value"
        found[key] = value
    return found


def unit_paths() -> list[Path]:
    return sorted(SYSTEMD.glob("*.service"))


def instances(unit: Path) -> list[str]:
    """The instance names a unit is checked with: each example rank for a template."""
    return [str(rank) for rank in RANKS] if unit.name.endswith("@.service") else [""]


def unit_environment(unit: Path, instance: str) -> dict[str, str]:
    """The variables the unit's EnvironmentFiles give ``instance``, from the files in deploy/."""
    env: dict[str, str] = {}
    for named in values(read_unit(unit), "Service", "EnvironmentFile"):
        path = named.lstrip("-").replace("%i", instance)
        assert path.startswith(ETC), f"{unit.name}: EnvironmentFile {named} is not under {ETC}"
        shipped = SYSTEMD / path.removeprefix(ETC)
        assert shipped.is_file(), f"{unit.name}: deploy/systemd ships no {shipped.name}"
        env.update(read_env_file(shipped))
    return env


def expand_systemd(text: str, instance: str, env: Mapping[str, str]) -> str:
    """``%i`` and ``${VAR}`` / ``$VAR`` as systemd expands them in ExecStart."""
    text = text.replace("%i", instance).replace("%%", "%")

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in env, f"ExecStart uses ${name}, which no EnvironmentFile sets"
        return env[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", variable, text)


@pytest.mark.parametrize("unit", unit_paths(), ids=lambda p: p.name)
def test_unit_has_what_a_supervised_service_needs(unit: Path) -> None:
    """A description, environment files, the swa-es command, restarts that stop on a usage
    error (exit 2), a stop timeout, an unprivileged user and an install target."""
    sections = read_unit(unit)
    assert set(sections) == {"Unit", "Service", "Install"}, unit.name
    assert values(sections, "Unit", "Description")
    assert values(sections, "Service", "Type") == ["exec"]
    assert values(sections, "Service", "EnvironmentFile")
    (exec_start,) = values(sections, "Service", "ExecStart")
    assert COMMAND_LINE.match(exec_start), exec_start
    assert values(sections, "Service", "Restart") == ["always"]
    assert values(sections, "Service", "RestartPreventExitStatus") == ["2"]
    assert values(sections, "Service", "TimeoutStopSec")
    assert values(sections, "Service", "User") == ["swa-es"]
    assert values(sections, "Install", "WantedBy") == ["multi-user.target"]


def test_the_units_ship_a_bridge_per_rank_and_a_follower() -> None:
    """deploy/systemd holds the bridge template and the follower, and every file it ships is
    used by a unit."""
    names = {p.name for p in unit_paths()}
    assert names == {"swa-es-bridge@.service", "swa-es-follow.service"}
    used = {
        Path(value.lstrip("-").replace("%i", instance)).name
        for unit in unit_paths()
        for instance in instances(unit)
        for value in values(read_unit(unit), "Service", "EnvironmentFile")
    }
    shipped = {p.name for p in SYSTEMD.iterdir()} - names
    assert shipped == used


# --- the command lines -------------------------------------------------------------------------


def command_module(argv: list[str]) -> Any:
    """The module of the command ``argv`` runs (``swa_es.cli.<command>``)."""
    return importlib.import_module(f"swa_es.cli.{argv[0]}")


def variables_read_by(command: str) -> set[str]:
    """Every ``SWA_ES_*`` variable ``swa-es COMMAND`` reads (old names included)."""
    module = importlib.import_module(f"swa_es.cli.{command}")
    names = getattr(settings, "variables_of", lambda opt: (settings.env_name(opt.name),))
    return {name for opt in module.COMMAND.options() for name in names(opt)}


def configure(argv: list[str], env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The frozen config ``swa-es ARGV`` builds with exactly ``env``'s ``SWA_ES_*`` variables:
    the real parser, then the real flags-variables-defaults merge."""
    args = build_parser().parse_args(argv)
    with monkeypatch.context() as patch:
        for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
            patch.delenv(name)
        for name, value in env.items():
            if name.startswith(ENV_PREFIX):
                patch.setenv(name, value)
        return args.configure(vars(args))


def check_variables(where: str, command: str, env: Mapping[str, str]) -> None:
    unknown = {n for n in env if n.startswith(ENV_PREFIX)} - variables_read_by(command)
    assert not unknown, f"{where} sets variables `swa-es {command}` does not read: {unknown}"


@pytest.mark.parametrize(
    ("unit", "instance"),
    [(unit, instance) for unit in unit_paths() for instance in instances(unit)],
    ids=lambda value: value.name if isinstance(value, Path) else f"@{value}",
)
def test_unit_command_parses_and_configures(
    unit: Path, instance: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ExecStart, expanded for the instance, is a ``swa-es`` command line the parser takes; with
    the unit's EnvironmentFiles it makes a valid config (required options given, every value
    parses); every variable the files set is one that command reads."""
    env = unit_environment(unit, instance)
    (exec_start,) = values(read_unit(unit), "Service", "ExecStart")
    match = COMMAND_LINE.match(expand_systemd(exec_start, instance, env))
    assert match is not None
    argv = shlex.split(match.group("args"))
    check_variables(unit.name, argv[0], env)
    config = configure(argv, env, monkeypatch)
    assert config is not None
    check_guarded(unit.name, config)


def check_guarded(where: str, config: Any) -> None:
    """A config whose HTTP server listens beyond loopback has a token file and TLS: without
    them the command refuses to start (docs/security.md)."""
    listening = []
    if getattr(config, "http_port", None) is not None:
        listening.append(config.http_host)
    metrics = getattr(config, "metrics", None)
    if metrics is not None and metrics.port is not None:
        listening.append(metrics.host)
    if all(is_loopback(host) for host in listening):
        return
    access = config.http_access
    assert not access.insecure, f"{where}: --http-insecure beyond loopback"
    assert access.token_file is not None, f"{where}: listens on {listening} without a token file"
    assert access.tls_cert is not None and access.tls_key is not None, f"{where}: no TLS"


def systemd_config(unit: Path, instance: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    env = unit_environment(unit, instance)
    (exec_start,) = values(read_unit(unit), "Service", "ExecStart")
    match = COMMAND_LINE.match(expand_systemd(exec_start, instance, env))
    assert match is not None
    return configure(shlex.split(match.group("args")), env, monkeypatch)


def port_of(endpoint: str) -> int:
    port = urlsplit(endpoint).port
    assert port is not None, endpoint
    return port


def test_bridge_instances_read_their_ranks_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bridge @r reads the engine's sockets of rank r over loopback (publisher 5557 + r, replay
    5657 + r), serves /metrics on 9200 + r, and publishes under a source id of its own that
    names its rank; the follower's routing API port is none of those."""
    unit = SYSTEMD / "swa-es-bridge@.service"
    sources = set()
    for rank in RANKS:
        config = systemd_config(unit, str(rank), monkeypatch)
        assert config.endpoint == f"tcp://127.0.0.1:{KV_EVENTS_PORT + rank}"
        assert config.replay_endpoint == f"tcp://127.0.0.1:{REPLAY_PORT + rank}"
        assert config.metrics.port == BRIDGE_METRICS_PORT + rank
        assert config.source.endswith(f"-dp{rank}")
        sources.add(config.source)
    assert len(sources) == len(RANKS)
    follow = systemd_config(SYSTEMD / "swa-es-follow.service", "", monkeypatch)
    assert follow.http_port == 8080
    assert follow.snapshots is not None


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_finds_nothing(tmp_path: Path) -> None:
    """``systemd-analyze verify`` (systemd's own parser) reports no unknown key or bad value; the
    swa-es binary is swapped for /bin/true, which exists here."""
    for unit in unit_paths():
        exec_start = re.compile(r"^ExecStart=\S+/swa-es\b", flags=re.M)
        text = exec_start.sub("ExecStart=/bin/true", unit.read_text())
        name = unit.name.replace("@.service", "@0.service")
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


# --- Kubernetes --------------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    """Every object of deploy/kubernetes/*.yaml."""
    found: list[dict[str, Any]] = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc["kind"] == kind]


def containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, container) for every container of every Deployment and StatefulSet."""
    for doc in of_kind("Deployment") + of_kind("StatefulSet"):
        for container in doc["spec"]["template"]["spec"]["containers"]:
            yield doc, container


def swa_es_containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(w, c) for w, c in containers() if "swa-es" in c["image"]]


SAMPLE_FIELDS = {"metadata.name": "vllm-0", "metadata.namespace": "default"}
"""The values a fieldRef takes in the check (a StatefulSet's first pod)."""


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's variables: its ConfigMaps' (envFrom) and its own, fieldRefs sampled."""
    config_maps = {doc["metadata"]["name"]: doc["data"] for doc in of_kind("ConfigMap")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            env[item["name"]] = SAMPLE_FIELDS[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def container_argv(container: Mapping[str, Any]) -> list[str]:
    """The swa-es arguments, ``$(VAR)`` expanded from the container's variables as the kubelet
    does (the image's entry point is ``swa-es``)."""
    assert "command" not in container, "the swa-es image's entry point runs swa-es"
    env = container_env(container)

    def variable(match: re.Match[str]) -> str:
        assert match.group(1) in env, f"{container['name']}: $({match.group(1)}) is not set"
        return env[match.group(1)]

    return [re.sub(r"\$\((\w+)\)", variable, str(arg)) for arg in container["args"]]


def test_manifests_hold_followers_a_service_and_a_bridged_engine() -> None:
    kinds = sorted(doc["kind"] for doc in manifests())
    assert kinds == sorted(
        [
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Service",
            "Service",
            "StatefulSet",
            "NetworkPolicy",
        ]
    )
    commands = sorted(container_argv(c)[0] for _, c in swa_es_containers())
    assert commands == ["bridge", "bridge", "follow"]


@pytest.mark.parametrize(
    "name", [c["name"] for _, c in swa_es_containers()], ids=lambda name: str(name)
)
def test_container_command_parses_and_configures(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each swa-es container's arguments parse and, with its variables, make a valid config;
    every SWA_ES_* variable it gets is one its command reads."""
    (container,) = [c for _, c in swa_es_containers() if c["name"] == name]
    argv = container_argv(container)
    env = container_env(container)
    check_variables(f"container {name}", argv[0], env)
    config = configure(argv, env, monkeypatch)
    assert config is not None
    check_guarded(f"container {name}", config)


def container_ports(container: Mapping[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def probe_port(probe: Mapping[str, Any], ports: Mapping[str, int]) -> int:
    action = probe.get("httpGet") or probe.get("tcpSocket")
    assert action is not None
    port = action["port"]
    return ports[port] if isinstance(port, str) else int(port)


def test_follower_ports_probes_and_service_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower listens on every interface at the port it declares, its probes and the
    Service point there, the readiness probe asks /readyz over HTTPS (503 until restored and
    caught up), a token file and TLS guard it (it listens beyond loopback), and its snapshots go
    to a shared Kafka group (a new pod needs no disk)."""
    ((workload, container),) = [
        (w, c) for w, c in swa_es_containers() if container_argv(c)[0] == "follow"
    ]
    config = configure(container_argv(container), container_env(container), monkeypatch)
    ports = container_ports(container)
    assert config.http_host == "0.0.0.0" and config.http_port in ports.values()
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("readinessProbe", "livenessProbe"):
        if "httpGet" in container[probe]:
            assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    access = config.http_access
    assert access.token_file is not None and access.tls_cert and access.tls_key
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    for path in (access.token_file, access.tls_cert, access.tls_key):
        assert any(str(path).startswith(mount + "/") for mount in mounts), path
    for probe in ("readinessProbe", "livenessProbe"):
        assert probe_port(container[probe], ports) == config.http_port
    assert str(config.snapshots).startswith("kafka://") and "group=" in str(config.snapshots)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    services = [s for s in of_kind("Service") if s["spec"]["selector"].items() <= labels.items()]
    assert len(services) == 1
    (port,) = services[0]["spec"]["ports"]
    assert ports[port["targetPort"]] == config.http_port


def engine_kv_events(container: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The engine's --kv-events-config and its --data-parallel-size."""
    args = [str(a) for a in container["args"]]
    flags: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            flags[name] = value if sep else args[i + 1]
    return json.loads(flags["--kv-events-config"]), int(flags.get("--data-parallel-size", "1"))


def test_bridge_sidecars_read_their_engine_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """One bridge per data-parallel rank r of the engine in its pod: it reads the publisher at
    the engine's port + r and the replay socket at the engine's replay port + r over loopback,
    the engine binds its publisher (a `*` endpoint) and its replay socket on loopback, each
    bridge serves /metrics on a port of its own that its probe uses, and the NetworkPolicy opens
    only the API and those ports, never the engine's sockets."""
    (workload,) = of_kind("StatefulSet")
    pod = workload["spec"]["template"]["spec"]["containers"]
    (engine,) = [c for c in pod if "swa-es" not in c["image"]]
    kv_events, ranks = engine_kv_events(engine)
    assert kv_events["publisher"] == "zmq" and kv_events["enable_kv_cache_events"] is True
    assert urlsplit(kv_events["endpoint"]).hostname == "*"
    assert urlsplit(kv_events["replay_endpoint"]).hostname == "127.0.0.1"
    bridges = [c for c in pod if "swa-es" in c["image"]]
    assert len(bridges) == ranks > 1
    open_ports = {
        p["port"]
        for policy in of_kind("NetworkPolicy")
        for rule in policy["spec"]["ingress"]
        for p in rule["ports"]
    }
    metrics_ports = set()
    for rank, bridge in enumerate(bridges):
        config = configure(container_argv(bridge), container_env(bridge), monkeypatch)
        assert config.endpoint == f"tcp://127.0.0.1:{port_of(kv_events['endpoint']) + rank}"
        replay = port_of(kv_events["replay_endpoint"]) + rank
        assert config.replay_endpoint == f"tcp://127.0.0.1:{replay}"
        assert config.source.endswith(f"-dp{rank}") and config.wire_format == "vllm"
        assert config.metrics.port in container_ports(bridge).values()
        assert probe_port(bridge["livenessProbe"], container_ports(bridge)) == config.metrics.port
        metrics_ports.add(config.metrics.port)
        assert port_of(config.endpoint) not in open_ports and replay not in open_ports
    assert len(metrics_ports) == ranks
    engine_ports = set(container_ports(engine).values())
    assert open_ports == engine_ports | metrics_ports


def test_the_deploy_guide_names_every_file() -> None:
    """docs/deploy.md names each file deploy/ ships, and tools/build_wheel.sh it installs from."""
    guide = (REPO / "docs" / "deploy.md").read_text()
    for path in sorted((REPO / "deploy").rglob("*")):
        if path.is_file():
            assert path.name in guide, f"docs/deploy.md does not name {path.relative_to(REPO)}"
    assert "tools/build_wheel.sh" in guide
