"""``swa-es bench`` finds the benchmark scripts and hands them their arguments."""

from __future__ import annotations

import subprocess

import pytest

from swa_es.cli.bench import BENCHMARKS, bench_dir, scripts_for
from swa_es.options.values import SettingError
from tests.compose.services import swa_es_command


def test_every_benchmark_name_has_its_script() -> None:
    """cache, log and replica map to bench/<name>_bench.py of this checkout."""
    scripts = scripts_for("all", bench_dir())
    assert [s.name for s in scripts] == [f"{name}_bench.py" for name in BENCHMARKS]


def test_unknown_benchmark_is_a_setting_error() -> None:
    """A name that is not a benchmark is refused, naming the choices."""
    with pytest.raises(SettingError, match="cache, log, replica, codec"):
        scripts_for("gpu", bench_dir())


def test_arguments_reach_the_script() -> None:
    """``swa-es bench cache --help`` runs the cache benchmark's own --help."""
    result = subprocess.run(
        swa_es_command("bench", "cache", "--help"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: cache_bench.py" in result.stdout
