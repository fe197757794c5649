"""Shared fixtures: the device parameter, and the Kafka broker fixtures as a plugin."""

from __future__ import annotations

import pytest
import torch

pytest_plugins = ["tests.fixtures.kafka"]

_CUDA = torch.cuda.is_available()

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not _CUDA, reason="no CUDA device")],
    ),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device the cache runs on: cpu always, cuda when present (marked ``gpu``)."""
    return str(request.param)
