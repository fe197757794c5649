"""The core install needs no optional extra: a FileLog follower runs without torch, Kafka, ZMQ or
the HTTP services, and a command that needs a missing extra names it.

"Without" is made real in a child interpreter whose meta-path finder refuses every module of the
extras (``swa_es.cli.extras.EXTRA_OF_MODULE``), so ``import torch`` there fails exactly as it
does in an environment that never installed it (a venv made with ``--system-site-packages``
would still see torch). The log the child follows is written here by a real cache and publisher.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio

from cache import SWAKVAllocator, SWARadixCache
from log import open_log
from swa_es import Publisher
from swa_es.cli.extras import EXTRA_OF_MODULE, install_hint

REPO = Path(__file__).resolve().parents[2]

BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv.pop(1).split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".", 1)[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
"""

FOLLOW = """
import anyio, sys
from consumers import Follower, PrefixIndex, ReplicaSet
from log import open_log

async def main() -> None:
    async with await open_log("file://" + sys.argv[1] + "?readonly=true") as log:
        replicas = ReplicaSet()
        await Follower(log, views=[replicas, PrefixIndex(replicas)]).catch_up()
        print(replicas["worker-0"].state_digest())

anyio.run(main)
for name in sorted(sys.modules):
    if name.split(".", 1)[0] in BLOCKED:
        raise SystemExit(f"{name} was imported")
"""


def run_child(
    code: str, *args: str, blocked: tuple[str, ...] = tuple(EXTRA_OF_MODULE)
) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that cannot import the ``blocked`` top-level modules
    (by default every extra's)."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code, ",".join(blocked), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


async def publish(directory: Path) -> str:
    """A few requests' worth of batches from a real tree into a FileLog; the tree's digest."""
    alloc = SWAKVAllocator(full_size=64, swa_size=16, page_size=1, device="cpu")
    cache = SWARadixCache(alloc, sliding_window_size=4, page_size=1, enable_events=True)
    async with (
        await open_log(f"file://{directory}") as log,
        Publisher(cache, log, source="worker-0") as pub,
    ):
        for start in range(0, 40, 8):
            tokens = list(range(start, start + 8))
            indices = alloc.alloc(len(tokens))
            if indices is None:
                cache.evict(full_tokens=8, swa_tokens=8)
                indices = alloc.alloc(len(tokens))
            assert indices is not None
            cache.insert(tokens, indices)
            pub.step()
        cache.evict(swa_tokens=4)
        pub.step()
        await pub.flush()
    return cache.state_digest()


def test_a_filelog_follower_runs_without_any_extra(tmp_path: Path) -> None:
    """``consumers`` and ``log`` import and replay a FileLog to the primary's digest with torch,
    aiokafka, pyzmq, msgpack, starlette, uvicorn and prometheus_client all unavailable."""
    digest = anyio.run(publish, tmp_path / "log")
    done = run_child(FOLLOW, str(tmp_path / "log"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == digest


def test_the_blocker_does_block_torch() -> None:
    """The child really cannot import torch (else the test above proves nothing)."""
    done = run_child("import torch")
    assert done.returncode != 0
    assert "No module named 'torch'" in done.stderr


def test_a_command_names_the_extra_it_needs(tmp_path: Path) -> None:
    """``swa-es serve`` without torch and ``swa-es bridge`` without pyzmq fail with one line
    naming the extra to install; ``swa-es --help`` still lists every command."""
    cli = "from swa_es.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
    serve = run_child(
        cli, "serve", "--log", str(tmp_path / "log"), "--requests", "1", blocked=("torch",)
    )
    assert serve.returncode == 1
    assert serve.stderr.strip() == (
        "swa-es serve: error: needs torch, which is not installed: " + install_hint("cache")
    )
    bridge = run_child(
        cli, "bridge", "--zmq", "tcp://127.0.0.1:1", "--source", "e", blocked=("zmq", "msgpack")
    )
    assert bridge.returncode == 1
    assert install_hint("bridge") in bridge.stderr
    assert "Traceback" not in serve.stderr + bridge.stderr
    listed = run_child(cli, "--help")
    assert listed.returncode == 0
    for command in ("demo", "serve", "follow", "bridge", "inspect", "route", "snapshot"):
        assert f"    {command} " in listed.stdout


def test_the_command_line_restores_without_any_extra(tmp_path: Path) -> None:
    """``swa-es restore`` (log, follower, snapshots) runs on the core install alone and reports
    the primary's digest."""
    digest = anyio.run(publish, tmp_path / "log")
    cli = "from swa_es.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
    done = run_child(cli, "restore", str(tmp_path / "log"), "--snapshots", str(tmp_path / "snap"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sources"]["worker-0"]["digest"] == digest


CLIENT = """
import sys
from swa_es.client import AsyncRoutingClient, RoutingClient
with RoutingClient(sys.argv[1]) as client:
    answer = client.match(list(range(100, 124)))
print(answer.sources["c"].cached_tokens)
for name in sorted(sys.modules):
    if name.split(".", 1)[0] in BLOCKED:
        raise SystemExit(f"{name} was imported")
"""


async def test_the_client_extra_alone_serves_a_router(tmp_path: Path) -> None:
    """``swa_es.client`` imports and answers a match over real HTTP with only the ``client``
    extra's modules (httptools, msgpack, httpx) besides the core: no torch, Kafka or server."""
    from tests.service.test_routing_forms import serving

    client_modules = {"httptools", "msgpack", "httpx"}
    blocked = tuple(sorted(set(EXTRA_OF_MODULE) - client_modules))
    async with serving(tmp_path) as served:
        done = await anyio.to_thread.run_sync(
            lambda: run_child(CLIENT, served.url, blocked=blocked)
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "24"
