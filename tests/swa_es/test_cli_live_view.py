"""The demo's view and verdicts: rates, plain lines, the rich table, and a failed verdict."""

from __future__ import annotations

import io

from rich.console import Console

from swa_es.cli.demo import Verdict
from swa_es.cli.live_view import Frame, RateMeter, WorkerRow, plain_lines, render_table


def frame(events: int) -> Frame:
    """A one-worker frame with ``events`` published."""
    row = WorkerRow(
        "worker-0",
        requests=5,
        events=events,
        batches=4,
        resyncs=0,
        blocks=9,
        tombstones=2,
        lag_batches=1,
    )
    return Frame(elapsed_s=1.0, duration_s=10.0, rows=(row,), applied_batches=3, divergences=0)


def test_rate_meter_measures_growth_between_readings() -> None:
    """The first reading has no rate; later ones divide growth by elapsed time."""
    meter = RateMeter()
    assert meter.rate("a", 100, 10.0) == 0.0
    assert meter.rate("a", 300, 12.0) == 100.0
    assert meter.rate("a", 300, 12.0) == 0.0  # no time passed: no rate, not a division by zero


def test_plain_lines_show_every_column() -> None:
    """Off a terminal each worker gets one line with its counters and rate."""
    meter = RateMeter()
    meter.rate("worker-0", 0, 0.0)
    (line,) = plain_lines(frame(500), meter, 2.0)
    assert "worker-0:" in line and "events/s=250" in line and "tombstones=2" in line


def test_table_renders_the_worker_row() -> None:
    """The rich table holds the worker's values."""
    console = Console(file=io.StringIO(), width=120, record=True)
    console.print(render_table(frame(10), RateMeter(), 0.0))
    text = console.export_text()
    assert "worker-0" in text and "tombstones" in text and "3 batches applied" in text


def test_verdict_fails_on_a_different_or_missing_or_diverged_replica() -> None:
    """Only an equal, undiverged replica digest is a yes."""
    assert Verdict("w", "abc", "abc", None).ok
    assert not Verdict("w", "abc", "abd", None).ok
    assert not Verdict("w", "abc", None, None).ok
    assert not Verdict("w", "abc", "abc", "gap at seq 4").ok
