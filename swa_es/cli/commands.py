"""Runners of the ``swa-es`` sub-commands: parsed flags in, exit status out.

Each runner builds its command's config (flags, then ``SWA_ES_*``) and runs it on the asyncio
backend (aiokafka needs asyncio).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from rich.console import Console

from swa_es.cli import config as cfg
from swa_es.cli.main import EXIT_FAILED, EXIT_OK

Flags = dict[str, object]

_POSITIONAL: Final = frozenset({"log"})


def _run(main: Callable[[], Awaitable[int]]) -> int:
    return anyio.run(main, backend="asyncio")


def demo(flags: Flags) -> int:
    """``swa-es demo``."""
    config = cfg.demo_config(cfg.Sources.from_process(flags))
    from swa_es.cli.demo import run_demo

    console = Console(highlight=False)

    async def main() -> int:
        ok = await run_demo(config, console)
        verdict = "all replicas equal their primaries" if ok else "VERIFICATION FAILED"
        console.print(f"verified: {verdict}", soft_wrap=True)
        return EXIT_OK if ok else EXIT_FAILED

    return _run(main)


def inspect(flags: Flags) -> int:
    """``swa-es inspect``."""
    config = cfg.inspect_config(cfg.Sources.from_process(flags, _POSITIONAL))
    from swa_es.cli.inspect import run_inspect

    async def main() -> int:
        report = await run_inspect(config, sys.stdout, sys.stderr)
        return EXIT_OK if report.ok else EXIT_FAILED

    return _run(main)


def serve(flags: Flags) -> int:
    """``swa-es serve``."""
    config = cfg.serve_config(cfg.Sources.from_process(flags))
    from swa_es.cli.serve import run_serve

    return _run(lambda: run_serve(config))


def follow(flags: Flags) -> int:
    """``swa-es follow``."""
    config = cfg.follow_config(cfg.Sources.from_process(flags))
    from swa_es.cli.follow import run_follow

    return _run(lambda: run_follow(config))


def route(flags: Flags) -> int:
    """``swa-es route``."""
    config = cfg.route_config(cfg.Sources.from_process(flags, _POSITIONAL))
    from swa_es.cli.route import run_route

    return _run(lambda: run_route(config, sys.stdout))


def snapshot(flags: Flags) -> int:
    """``swa-es snapshot``."""
    config = cfg.snapshot_config(cfg.Sources.from_process(flags, _POSITIONAL))
    from swa_es.cli.snapshot import run_snapshot

    return _run(lambda: run_snapshot(config, sys.stdout))


def restore(flags: Flags) -> int:
    """``swa-es restore``."""
    config = cfg.snapshot_config(cfg.Sources.from_process(flags, _POSITIONAL))
    from swa_es.cli.snapshot import run_restore

    return _run(lambda: run_restore(config, sys.stdout))


def bench(flags: Flags) -> int:
    """``swa-es bench``."""
    from swa_es.cli.bench import run_bench

    name = str(flags.get("name") or "all")
    extra = flags.get("args") or []
    assert isinstance(extra, list)
    return run_bench(name, [str(a) for a in extra])


RUNNERS: Final[dict[str, Callable[[Flags], int]]] = {
    "demo": demo,
    "serve": serve,
    "follow": follow,
    "inspect": inspect,
    "route": route,
    "snapshot": snapshot,
    "restore": restore,
    "bench": bench,
}
