"""Prediction quality measured end to end: simulated workers (real ``SWARadixCache`` trees and
publishers) routed by asking a follower's ``/v1/match`` over real HTTP, each engine's actual
reuse (its cache's own match) reported to ``/v1/feedback``, the quality read back from
``/v1/quality``. While every source publishes, every prediction is exact and no request is
routed wrongly; once one source's events are withheld, wrong routes appear, all on that source.
"""

from __future__ import annotations

import subprocess

import pytest

from swa_es.cli.demo_routing import Phase, ReportForm, RoutedRun
from tests.compose.services import swa_es_command

pytestmark = pytest.mark.slow


async def _phases(*, restart_withheld: bool = True, report: ReportForm = "answer") -> list[Phase]:
    run = RoutedRun(
        requests=240, withhold_after=120, restart_withheld=restart_withheld, report=report
    )
    phases = await run.run()
    assert [phase.reports for phase in phases] == [120, 120]
    return phases


def _assert_exact(phase: Phase) -> None:
    assert phase.incorrect == 0
    assert phase.exact_predictions == phase.predicted_reports == phase.reports
    assert phase.reused_tokens > 0


async def test_wrong_routes_are_none_while_the_index_is_exact_and_rise_once_it_is_stale() -> None:
    """The withheld source's engine restarts unseen: requests sent to it on the strength of
    blocks it no longer holds reuse less than another worker held, and are counted wrong."""
    exact, stale = await _phases(restart_withheld=True)
    _assert_exact(exact)
    assert stale.incorrect_rate >= 0.05, stale.line()
    assert stale.exact_predictions < stale.predicted_reports
    assert {source for source, (_, bad) in stale.by_source.items() if bad} == {"worker-0"}


async def test_withheld_evictions_alone_make_wrong_routes_too() -> None:
    """No restart: the withheld source only evicts as it serves, unseen."""
    exact, stale = await _phases(restart_withheld=False)
    _assert_exact(exact)
    assert stale.incorrect > 0, stale.line()
    assert stale.exact_predictions < stale.predicted_reports


async def test_reporting_the_prompt_before_the_engine_publishes_measures_the_same() -> None:
    """Reports carrying the prompt (matched by the follower on arrival, before it can hear of
    the request) measure what reports carrying the answer routed on measure."""
    by_answer = await _phases(report="answer")
    by_prompt = await _phases(report="prompt")
    assert by_prompt == by_answer


def test_the_demo_routes_and_reports_what_it_measured() -> None:
    """``swa-es demo --route``, as a user runs it: a line per phase, exit 0."""
    result = subprocess.run(
        swa_es_command("demo", "--route", "--workers", "3"),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    lines = result.stdout.splitlines()
    exact = next(line for line in lines if line.startswith("exact index: "))
    assert "120 requests, 0 routed wrongly (0.0%), 120 of 120 predictions exact" in exact
    stale = next(line for line in lines if line.startswith("worker-0's events withheld: "))
    assert " 0 routed wrongly" not in stale, stale
    assert "verified: no wrong routes while the index was exact" in result.stdout
