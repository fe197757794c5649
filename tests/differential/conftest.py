"""Fixtures of the differential tests: sglang's driver process and the run tally.

Without ``bench/.venv-sglang`` the tests are skipped, naming the setup command; with
``SWA_ES_REQUIRE_SGLANG=1`` (CI) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.differential.remote import SETUP_HINT, SglangDriver, sglang_unavailable_reason


@dataclass
class Tally:
    """Sequences and steps that ran to the end with identical outcomes, per page size."""

    sequences: dict[int, int] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)

    def add(self, page_size: int, steps: int) -> None:
        """Count one sequence of ``steps`` steps that matched sglang throughout."""
        self.sequences[page_size] = self.sequences.get(page_size, 0) + 1
        self.steps[page_size] = self.steps.get(page_size, 0) + steps


_TALLY = pytest.StashKey[Tally]()


@pytest.fixture(scope="session")
def sglang_driver() -> Iterator[SglangDriver]:
    """sglang's ``SWARadixCache`` in a subprocess of its own venv, for the whole session."""
    reason = sglang_unavailable_reason()
    if reason is not None:
        if os.environ.get("SWA_ES_REQUIRE_SGLANG", "") == "1":
            pytest.fail(f"sglang required (SWA_ES_REQUIRE_SGLANG=1) but unavailable: {reason}")
        pytest.skip(f"sglang 0.5.16 not set up ({SETUP_HINT}): {reason}")
    with SglangDriver() as driver:
        yield driver


@pytest.fixture(scope="session")
def diff_tally(pytestconfig: pytest.Config) -> Tally:
    """The session's tally, printed in the terminal summary."""
    return pytestconfig.stash.setdefault(_TALLY, Tally())


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Print how many sequences and steps matched sglang, per page size."""
    tally = config.stash.get(_TALLY, None)
    if tally is None or not tally.sequences:
        return
    terminalreporter.section("differential vs sglang 0.5.16")
    for page_size in sorted(tally.sequences):
        terminalreporter.write_line(
            f"page size {page_size}: {tally.sequences[page_size]} sequences, "
            f"{tally.steps[page_size]} steps, identical outcomes"
        )
