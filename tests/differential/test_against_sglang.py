"""Our SWARadixCache against sglang 0.5.16's own, step by step, on random seeded sequences.

``SWA_ES_DIFF_STEPS`` sets the steps run per page size (default 2500: about 10k in all, what CI
runs); ``SWA_ES_DIFF_SEED`` the base seed. The long local run::

    SWA_ES_DIFF_STEPS=100000 .venv/bin/python -m pytest -m sglang tests/differential -q
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from tests.differential.compare import check_sequence
from tests.differential.conftest import Tally
from tests.differential.remote import SglangDriver
from tests.differential.steps import CacheConfig, Step
from tests.differential.strategies import configs, sequences

pytestmark = pytest.mark.sglang

STEPS_PER_PAGE_SIZE = int(os.environ.get("SWA_ES_DIFF_STEPS", "2500"))
BASE_SEED = int(os.environ.get("SWA_ES_DIFF_SEED", "1116"))
MIN_STEPS, MAX_STEPS = 20, 100
EXAMPLES_PER_BATCH = 50


def _run_batch(
    driver: SglangDriver, tally: Tally, page_size: int, seed: int, examples: int
) -> None:
    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(config=configs(page_size), steps=sequences(page_size, MIN_STEPS, MAX_STEPS))
    def sequence_matches(config: CacheConfig, steps: list[Step]) -> None:
        check_sequence(driver, config, steps)
        passed.append(len(steps))

    passed: list[int] = []
    sequence_matches()
    for steps in passed:  # only a batch with no divergence counts (shrinking reruns examples)
        tally.add(page_size, steps)


# The first test also waits for the driver to import sglang (START_TIMEOUT_S); then about 5 ms
# a step at worst.
@pytest.mark.timeout(max(900, STEPS_PER_PAGE_SIZE // 20))
@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_same_outcomes_as_sglang(
    page_size: int, sglang_driver: SglangDriver, diff_tally: Tally
) -> None:
    """Each step's returns, pools, sizes and events equal sglang's (STEPS_PER_PAGE_SIZE steps)."""
    batch = 0
    while diff_tally.steps.get(page_size, 0) < STEPS_PER_PAGE_SIZE:
        left = STEPS_PER_PAGE_SIZE - diff_tally.steps.get(page_size, 0)
        examples = min(EXAMPLES_PER_BATCH, -(-left // MIN_STEPS))
        seed = (BASE_SEED * 100 + page_size) * 1000 + batch
        _run_batch(sglang_driver, diff_tally, page_size, seed, examples)
        batch += 1
