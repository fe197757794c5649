"""``bench/report.py render`` turns benchmark JSON into RESULTS.md tables, also JSON whose shape
it does not know (a reworked benchmark is rendered, not dropped)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_report() -> ModuleType:
    """``bench/report.py`` as a module (bench/ is scripts, not a package)."""
    sys.path.insert(0, str(BENCH))  # report.py imports its sibling machine_load
    try:
        spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_known_and_unknown_benchmarks_render(tmp_path: Path) -> None:
    """A wrapped ``log_kafka`` record gets its table with command and machine row; a bare JSON of
    an unknown shape still gets one row per entry, named after its file."""
    report = load_report()
    (tmp_path / "log_kafka.json").write_text(
        json.dumps(
            {
                "benchmark": "log_kafka",
                "command": ".venv/bin/python bench/log_bench_kafka.py --count 10",
                "machine": {"cpus": 2, "load_average_1m": 1.5, "steal_share": 0.01},
                "result": {
                    "count": 10,
                    "record_bytes": 1024,
                    "kafkalog_mb_s": 20.0,
                    "producer_performance_mb_s": 10.0,
                    "ratio": 2.0,
                },
            }
        )
    )
    (tmp_path / "newbench.json").write_text(
        json.dumps({"binary": {"rps": 1234.5, "p50_ms": 0.5}, "speedup": 3.25, "note": "x"})
    )
    text = report.render([tmp_path / "log_kafka.json", tmp_path / "newbench.json"])
    assert "`.venv/bin/python bench/log_bench_kafka.py --count 10`" in text
    row = f"| KafkaLog appends, 10 {report.X} 1,024 B | 20.0 MB/s | ProducerPerformance: 10.0 MB/s"
    assert row in text
    assert "2 CPUs, load average 1.50 at the end, steal 1.0% of CPU time" in text
    assert "## newbench" in text
    assert "| `binary` | rps 1,234; p50_ms 0.50 |" in text
    assert "| `speedup` | 3.25 |" in text
    assert text.index("## KafkaLog") < text.index("## newbench")


def test_committed_results_come_from_the_renderer() -> None:
    """RESULTS.md is the renderer's output (its introduction and one section per benchmark)."""
    text = (BENCH / "RESULTS.md").read_text()
    report = load_report()
    assert text.startswith(report.INTRO)
    for bench in report.BENCHMARKS:
        assert f"## {bench.title}" in text
