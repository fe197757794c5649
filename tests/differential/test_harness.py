"""The differential harness itself, on our cache only (no sglang needed)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from cache.tree.node import TreeNode
from tests.differential.compare import first_difference, run_ours
from tests.differential.ours import OursCache, path_boundaries
from tests.differential.program import StepRunner
from tests.differential.remote import sglang_unavailable_reason
from tests.differential.steps import (
    CacheConfig,
    Evict,
    Finish,
    Request,
    Reset,
    Scratch,
    Step,
    step_from_json,
    step_to_json,
)
from tests.differential.strategies import configs, sequences

SAMPLE: list[Step] = [
    Request((1, 2, 3, 4, 5), 5),
    Request((1, 2, 3, 9, 9, 9), 3, hold=True),
    Evict(3, 2),
    Scratch(2, 1, 3),
    Finish(4),
    Request((1, 2, 3, 4, 5, 6), 6),
    Reset(),
    Request((7, 7), 1),
]


def test_steps_round_trip_through_json() -> None:
    """Every step kind reads back equal from the JSON the driver protocol carries."""
    for step in SAMPLE:
        assert step_from_json(step_to_json(step)) == step


def test_our_runs_are_deterministic() -> None:
    """The same steps on two fresh caches give the same outcomes (comparisons rely on it)."""
    config = CacheConfig(page_size=1, window=2, full_size=12, swa_size=8)
    first, _ = run_ours(config, SAMPLE)
    second, _ = run_ours(config, SAMPLE)
    assert first == second and first_difference(first, second) is None
    assert all("error" not in outcome for outcome in first)


def test_first_difference_names_the_first_changed_step() -> None:
    """A changed outcome, an error, or a missing one is found at its index."""
    config = CacheConfig(page_size=2, window=3, full_size=16, swa_size=8)
    outcomes, _ = run_ours(config, SAMPLE)
    changed = [dict(o) for o in outcomes]
    changed[3] = {**changed[3], "pools": [0, 0]}
    assert first_difference(outcomes, changed) == 3
    assert first_difference(outcomes, outcomes[:5]) == 5
    errored = [*outcomes[:2], {"error": "boom"}]
    assert first_difference(errored, errored) == 2


class _LockMustNotSplit(OursCache):
    """Our cache, failing if a lock changes the node boundaries of the path it locks."""

    def lock(self, node: object) -> object:
        assert isinstance(node, TreeNode)
        before = path_boundaries(node)
        lock = super().lock(node)
        assert path_boundaries(node) == before, "the window-capped lock split a node"
        return lock


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(2), steps=sequences(2, 20, 60))
def test_requests_never_let_our_lock_split(config: CacheConfig, steps: list[Step]) -> None:
    """The boundary match keeps the window-capped lock (intended.py) out of every sequence."""
    runner = StepRunner(_LockMustNotSplit(config))
    runner.start()
    for step in steps:
        outcome = runner.run(step)
        assert "error" not in outcome, outcome


def test_a_missing_sglang_venv_is_named_with_its_setup_command(tmp_path: Path) -> None:
    """Without the venv the skip (or, in CI, failure) reason says how to make it."""
    reason = sglang_unavailable_reason(tmp_path / "python")
    assert reason is not None and "bash bench/setup_sglang.sh" in reason
