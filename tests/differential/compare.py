"""Running one sequence on both caches and explaining the first step where they differ."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tests.differential.ours import OursCache
from tests.differential.program import Outcome, StepRunner
from tests.differential.remote import SglangDriver
from tests.differential.steps import CacheConfig, Step, step_to_json


def run_ours(config: CacheConfig, steps: Sequence[Step]) -> tuple[list[Outcome], list[str]]:
    """Our outcomes for ``steps`` on a fresh cache (construction first), and our final state."""
    runner = StepRunner(OursCache(config))
    outcomes = [runner.start()]
    outcomes.extend(runner.run(step) for step in steps)
    return outcomes, runner.describe()


def first_difference(ours: Sequence[Outcome], theirs: Sequence[Outcome]) -> int | None:
    """The index of the first outcome that differs, or that only one side has."""
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b or "error" in a:
            return index
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def _differing_fields(ours: Outcome, theirs: Outcome) -> list[str]:
    keys = sorted(set(ours) | set(theirs))
    return [k for k in keys if ours.get(k) != theirs.get(k)]


def explain(
    driver: SglangDriver,
    config: CacheConfig,
    steps: Sequence[Step],
    index: int,
    ours: Sequence[Outcome],
    theirs: Sequence[Outcome],
) -> str:
    """A report of divergence at outcome ``index`` (0 is the fresh cache, k is ``steps[k-1]``)."""
    lines = [
        f"our cache and sglang's differ at step {index} of {len(steps)} ({config})",
        "steps up to it, one JSON object per line:",
        *(json.dumps(step_to_json(s)) for s in steps[:index]),
    ]
    if index < len(ours) and index < len(theirs):
        lines.append(
            "fields that differ: " + ", ".join(_differing_fields(ours[index], theirs[index]))
        )
    for name, outcomes in (("ours", ours), ("sglang", theirs)):
        lines.append(f"{name}: {json.dumps(outcomes[index]) if index < len(outcomes) else '-'}")
    for label, prefix in (("before", steps[: max(0, index - 1)]), ("after", steps[:index])):
        _, our_state = run_ours(config, prefix)
        their_state = driver.run(config, prefix, describe=True).describe or []
        lines.append(f"--- state {label} that step: ours")
        lines.extend(our_state)
        lines.append(f"--- state {label} that step: sglang")
        lines.extend(their_state)
    return "\n".join(lines)


class DivergenceError(AssertionError):
    """The two caches differ; the report (which reruns the sequence) is built when first read.

    Hypothesis raises this for every candidate it tries while shrinking, and only the last one
    is shown, so the costly explanation is deferred to ``str()``.
    """

    def __init__(
        self,
        driver: SglangDriver,
        config: CacheConfig,
        steps: Sequence[Step],
        index: int,
        outcomes: tuple[Sequence[Outcome], Sequence[Outcome]],
    ) -> None:
        super().__init__(f"our cache and sglang's differ at step {index}")
        self._args = (driver, config, steps, index, *outcomes)
        self._report: str | None = None

    def __str__(self) -> str:
        if self._report is None:
            self._report = explain(*self._args)
        return self._report


def check_sequence(driver: SglangDriver, config: CacheConfig, steps: Sequence[Step]) -> None:
    """Run ``steps`` on both caches; raise ``DivergenceError`` at the first difference."""
    theirs = driver.run(config, steps).outcomes
    ours, _ = run_ours(config, steps)
    index = first_difference(ours, theirs)
    if index is not None:
        raise DivergenceError(driver, config, steps, index, (ours, theirs))
