"""How long the fault, model and soak tests run: short and seeded in CI, full on request.

Each knob is an environment variable read only here (tests, not the product). Unset, a test
runs its CI size; docs/reliability.md gives the command for the full size.

- ``SWA_ES_FAULT_ROUNDS``: kill/restart rounds of the fault loops (full: 100).
- ``SWA_ES_FAULT_SEED``: the seed of every randomised fault, model and fuzz choice (default
  fixed, so CI is reproducible; each test prints the seed it used).
- ``SWA_ES_MODEL_SEQUENCES``: operation sequences of the pipeline model test (full: 10000).
- ``SWA_ES_SOAK_S``: seconds of the soak test (full: 600).
"""

from __future__ import annotations

import os

DEFAULT_SEED = 20260513


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    value = int(raw)
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return value


def fault_rounds(ci_default: int) -> int:
    """Rounds of a fault loop: ``SWA_ES_FAULT_ROUNDS`` or the test's CI default."""
    return _positive_int("SWA_ES_FAULT_ROUNDS", ci_default)


def seed() -> int:
    """The seed of this run (``SWA_ES_FAULT_SEED`` or a fixed default)."""
    return _positive_int("SWA_ES_FAULT_SEED", DEFAULT_SEED)


def model_sequences(ci_default: int) -> int:
    """Sequences of the pipeline model test: ``SWA_ES_MODEL_SEQUENCES`` or the CI default."""
    return _positive_int("SWA_ES_MODEL_SEQUENCES", ci_default)


def soak_seconds(ci_default: int) -> int:
    """Length of the soak: ``SWA_ES_SOAK_S`` or the CI default."""
    return _positive_int("SWA_ES_SOAK_S", ci_default)
