"""``swa-es bench``: run the benchmark scripts of a source checkout's ``bench/`` folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

from swa_es.cli.config import SettingError

BENCHMARKS: Final = ("cache", "log", "replica")


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


def run_bench(name: str, args: list[str]) -> int:
    """Run the chosen benchmarks one after another with ``args``; the worst exit status."""
    status = 0
    for script in scripts_for(name, bench_dir()):
        print(f"== {script.name} {' '.join(args)}", flush=True)
        status = max(status, subprocess.run([sys.executable, str(script), *args]).returncode)
    return status
