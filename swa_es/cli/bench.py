"""``swa-es bench``: run the benchmark scripts of a source checkout's ``bench/`` folder."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from swa_es.cli import settings
from swa_es.cli.settings import Command
from swa_es.options.values import SettingError

BENCHMARKS: Final = ("cache", "log", "replica", "codec")


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """``swa-es bench NAME ARGS...``: which benchmark and the arguments passed through."""

    name: str
    args: tuple[str, ...]


COMMAND = Command("bench", None)


def _configure(flags: Mapping[str, object]) -> BenchConfig:
    extra = flags.get("args") or []
    assert isinstance(extra, list)
    return BenchConfig(str(flags.get("name") or "all"), tuple(str(a) for a in extra))


def add_parser(subparsers: Any) -> None:
    """Add ``bench`` (no settings: a name and the arguments for the script)."""
    parser = settings.add_command(
        subparsers,
        COMMAND,
        help="run the benchmarks in bench/",
        description="Run bench/<NAME>_bench.py with the remaining arguments.",
        run=run,
        configure=_configure,
    )
    parser.add_argument("name", nargs="?", default="all", help="cache, log, replica, codec or all")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")


def bench_dir() -> Path:
    """``bench/`` beside the ``swa_es`` package (an editable or source checkout)."""
    return Path(__file__).resolve().parents[2] / "bench"


def scripts_for(name: str, directory: Path) -> list[Path]:
    """The scripts ``name`` stands for (``all``: every benchmark present)."""
    if name != "all" and name not in BENCHMARKS:
        raise SettingError(
            "bench", f"unknown benchmark {name!r} (one of {', '.join(BENCHMARKS)}, all)"
        )
    names = BENCHMARKS if name == "all" else (name,)
    scripts = [directory / f"{n}_bench.py" for n in names]
    present = [s for s in scripts if s.is_file()]
    if not present:
        raise SettingError(
            "bench", f"no benchmark scripts in {directory} (needs a source checkout of swa-es)"
        )
    return present


def run(config: BenchConfig) -> int:
    """Run the chosen benchmarks one after another with their arguments; the worst status."""
    status = 0
    for script in scripts_for(config.name, bench_dir()):
        print(f"== {script.name} {' '.join(config.args)}", flush=True)
        command = [sys.executable, str(script), *config.args]
        status = max(status, subprocess.run(command).returncode)
    return status
