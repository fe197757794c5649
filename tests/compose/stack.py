"""Driving the running compose stack from the host: the Docker CLI for faults (kill, start,
network disconnect), ``docker exec`` / ``docker run`` in the stack's network for what the
services answer, and the published 127.0.0.1 Kafka listeners for reading the log back.

Only ``tools/compose.sh test`` sets ``SWA_ES_COMPOSE_STACK=1``; elsewhere the stack tests skip
(and fail under ``SWA_ES_REQUIRE_COMPOSE=1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from swa_es.testing.metrics import parse_samples
from tests.peers.json_lines import JsonLinesPeer, PeerExitedError

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "swa-es"
NETWORK = f"{PROJECT}_default"
TOPIC = "swa-es-events"
HOST_BOOTSTRAP = "127.0.0.1:39192,127.0.0.1:39193,127.0.0.1:39194"
HOST_LOG_URL = f"kafka://{HOST_BOOTSTRAP}/{TOPIC}?partitions=2&replication_factor=3"
PRIMARIES = ("primary-0", "primary-1")
FOLLOWERS = ("follower-a", "follower-b")
ROUTING_PORT = 8080
METRICS_PORT = 9100
WAIT_S = 180.0

T = TypeVar("T")


def run(*args: str, timeout_s: float = 120.0) -> str:
    """stdout of a command that must succeed (its stderr in the failure)."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def compose(*args: str, timeout_s: float = 180.0) -> str:
    """``docker compose ARGS`` with the image choice ``tools/compose.sh`` made."""
    env_file = ROOT / ".compose" / "images.env"
    prefix = ["--env-file", str(env_file)] if env_file.exists() else []
    return run("docker", "compose", *prefix, *args, timeout_s=timeout_s)


def container(service: str) -> str:
    """The container id of a service (running or stopped)."""
    cid = compose("ps", "--all", "-q", service).strip()
    assert cid, f"no container for {service}"
    return cid


def read_file(service: str, path: str) -> bytes:
    """A file of a service's container, running or stopped (``docker cp`` reads both)."""
    done = subprocess.run(
        ["docker", "cp", f"{container(service)}:{path}", "-"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        member = archive.next()
        assert member is not None
        extracted = archive.extractfile(member)
        assert extracted is not None
        return extracted.read()


def status(service: str) -> dict[str, Any] | None:
    """The service's status file (/data/status.json), if one was written yet."""
    try:
        data: dict[str, Any] = json.loads(read_file(service, "/data/status.json"))
    except (subprocess.CalledProcessError, json.JSONDecodeError):
        return None
    return data


HTTP_SNIPPET = (
    "import sys, urllib.request\n"
    "body = sys.argv[2].encode() if len(sys.argv) > 2 else None\n"
    "request = urllib.request.Request(sys.argv[1], data=body,"
    " headers={'Content-Type': 'application/json'})\n"
    "print(urllib.request.urlopen(request, timeout=10).read().decode())\n"
)


def text_in(service: str, path: str, body: Any = None, port: int = ROUTING_PORT) -> str:
    """Body of a service's own HTTP port, asked inside its container (works while the
    container is off the network, where a published port would not)."""
    args = [f"http://127.0.0.1:{port}{path}"]
    if body is not None:
        args.append(json.dumps(body))
    return run("docker", "exec", container(service), "python", "-c", HTTP_SNIPPET, *args)


def http_in(service: str, path: str, body: Any = None) -> Any:
    """JSON answer of a service's routing API, asked inside its container."""
    return json.loads(text_in(service, path, body))


def metrics_in(service: str) -> dict[str, float]:
    """The /metrics samples of a service (port 9100 in every swa-es container)."""
    return parse_samples(text_in(service, "/metrics", port=METRICS_PORT))


def http_from_another_container(url: str, body: Any = None) -> Any:
    """JSON answer of ``url`` asked from a fresh container on the stack's network."""
    image = run("docker", "inspect", "--format", "{{.Config.Image}}", container(FOLLOWERS[0]))
    args = [url] if body is None else [url, json.dumps(body)]
    out = run(
        "docker", "run", "--rm", "--network", NETWORK, "--entrypoint", "python",
        image.strip(), "-c", HTTP_SNIPPET, *args,
    )  # fmt: skip
    return json.loads(out)


def sources(service: str) -> dict[str, dict[str, Any]]:
    """``/v1/sources`` of a follower."""
    answer = http_in(service, "/v1/sources")
    return dict(answer.get("sources", answer))


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """Poll ``probe`` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except Exception as exc:  # a fault under test: any error, try again
            last_error = exc
        time.sleep(1.0)
    raise AssertionError(f"no {what} within {timeout_s} s (last error: {last_error})")


def start(*services: str) -> None:
    """Start stopped services and wait until their healthchecks pass."""
    compose("up", "-d", "--no-build", "--no-recreate", "--wait", "--wait-timeout", "240", *services,
            timeout_s=300)  # fmt: skip


def start_primaries() -> None:
    """Start both primaries and wait until each has published something."""
    start(*PRIMARIES)
    for service in PRIMARIES:
        wait_for(f"{service} publishing", functools.partial(published, service))


def published(service: str) -> int:
    """Batches a primary's status says the log acknowledged (0 before its first status)."""
    now = status(service)
    return 0 if now is None else int(now["publisher"]["batches_published"])


def stop_primaries() -> dict[str, dict[str, Any]]:
    """SIGTERM both primaries (they flush, then write a final status); per source that status."""
    compose("stop", "--timeout", "90", *PRIMARIES, timeout_s=200)
    finals: dict[str, dict[str, Any]] = {}
    for service in PRIMARIES:
        final = status(service)
        assert final is not None and final["flushed"], f"{service}: no final status: {final}"
        publisher = final["publisher"]
        assert not publisher["failed"] and publisher["queue_depth"] == 0, publisher
        finals[final["source"]] = final
    return finals


def converged(follower: str, finals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Wait until a follower's /v1/sources holds every primary's final digest, undiverged
    (exact, or offline once it read the marker a primary appends when it stops)."""

    def probe() -> dict[str, Any] | None:
        now = sources(follower)
        for source, final in finals.items():
            replica = now.get(source) or {}
            if replica.get("digest") != final["digest"] or replica.get("diverged") is not None:
                return None
            if replica.get("state") not in ("exact", "offline"):
                return None
        return now

    return wait_for(f"{follower} at the primaries' final digests", probe)


def log_batches(source: str, epoch: str | None, *, brief: bool = True) -> list[dict[str, Any]]:
    """The batches of one source and epoch (every epoch: None) in the log (event counts only
    when ``brief``), read over the published ports."""
    out = run(
        str(ROOT / ".venv" / "bin" / "swa-es"), "inspect", *(["--brief"] if brief else []),
        "--source", source, HOST_LOG_URL, timeout_s=300,
    )  # fmt: skip
    batches = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [b for b in batches if epoch is None or b["epoch"] == epoch]


def partition_leaders() -> dict[int, int]:
    """Partition -> leader broker id of the topic, from the cluster's metadata."""
    from aiokafka.admin import AIOKafkaAdminClient  # the host venv's client

    async def describe() -> dict[int, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=HOST_BOOTSTRAP.split(","))
        await admin.start()
        try:
            (topic,) = await admin.describe_topics([TOPIC])
            return {int(p["partition"]): int(p["leader"]) for p in topic["partitions"]}
        finally:
            await admin.close()

    return asyncio.run(describe())


def live_root_block(batches: list[dict[str, Any]]) -> list[int]:
    """The tokens of a first-page block the log says is still cached at its end: stored with no
    parent and never removed or cleared afterwards."""
    live: dict[int, list[int]] = {}
    for batch in batches:
        for event in batch["events"]:
            kind = event["type"]
            if kind == "BlockStored" and event["parent_block_hash"] is None:
                size = int(event["block_size"])
                live[event["block_hashes"][0]] = event["token_ids"][:size]
            elif kind == "BlockRemoved":
                for block in event["block_hashes"]:
                    live.pop(block, None)
            elif kind == "AllBlocksCleared":
                live.clear()
    assert live, "no first-page block is left cached at the end of the log"
    return next(reversed(live.values()))


SGLANG_IMAGE = "swa-es-sglang:local"
SGLANG_CONTAINER = "swa-es-sglang-engine"


class SglangContainer(JsonLinesPeer):
    """sglang 0.5.16's SWARadixCache and ZmqEventPublisher (tests/peers/sglang_kv_engine.py) in
    a container of its own on the stack's network, as ``sglang-engine``; commands go to its
    stdin (``docker run -i``), one JSON reply a line comes back."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [
                "docker", "run", "-i", "--rm", "--name", SGLANG_CONTAINER,
                "--network", NETWORK, "--network-alias", "sglang-engine", SGLANG_IMAGE,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        ready = self._read()
        assert ready.get("ready"), ready

    def serve(self, requests: int, seed: int) -> int:
        """Serve ``requests`` chat requests; how many event batches sglang published so far."""
        return int(self.command(cmd="serve", requests=requests, seed=seed)["published"])

    def blocks(self) -> set[int]:
        """The block hash of every page sglang's tree holds."""
        return set(self.command(cmd="blocks")["blocks"])

    def close(self) -> None:
        """Shut sglang's publisher down; the container goes (``--rm``)."""
        if self.process.poll() is None:
            with contextlib.suppress(PeerExitedError, BrokenPipeError):
                self.command(cmd="exit")
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            subprocess.run(["docker", "rm", "-f", SGLANG_CONTAINER], capture_output=True)
            self.process.wait(timeout=60)
