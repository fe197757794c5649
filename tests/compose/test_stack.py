"""Checks of a running compose stack (``docker compose run --rm tests``).

The tests service sets ``SWA_ES_STACK_PRIMARIES`` / ``SWA_ES_STACK_FOLLOWERS`` to the services'
base URLs; anywhere else these tests skip.
"""

from __future__ import annotations

import os
import time
import urllib.request

import pytest

from swa_es.testing.metrics import parse_samples

pytestmark = pytest.mark.compose

WAIT_S = 120.0


def endpoints(variable: str) -> list[str]:
    """The base URLs a stack variable lists (skip when it is not set)."""
    value = os.environ.get(variable, "")
    if not value:
        pytest.skip(f"{variable} is not set: not running inside the compose stack")
    return [url.rstrip("/") for url in value.split(",")]


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(base: str) -> dict[str, float]:
    """The /metrics samples of a service."""
    status, body = get(base + "/metrics")
    assert status == 200
    return parse_samples(body)


def wait_until(what: str, check: object, timeout_s: float = WAIT_S) -> None:
    """Poll ``check()`` until it is true."""
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.5)


def test_services_are_healthy() -> None:
    """Every primary and follower answers /healthz with 200."""
    for base in endpoints("SWA_ES_STACK_PRIMARIES") + endpoints("SWA_ES_STACK_FOLLOWERS"):
        assert get(base + "/healthz")[0] == 200, base


def test_followers_apply_both_primaries_and_agree_with_in_band_digests() -> None:
    """Each follower's counters move, it holds every primary's source, checks in-band
    digests and never diverges."""
    primaries = endpoints("SWA_ES_STACK_PRIMARIES")
    sources = set()
    for base in primaries:
        sources |= {
            k.split('"')[1] for k in samples(base) if k.startswith("swa_es_primary_requests")
        }
    for base in endpoints("SWA_ES_STACK_FOLLOWERS"):
        first = samples(base)["swa_es_follower_batches_applied_total"]
        wait_until(
            "new batches",
            lambda b=base, f=first: samples(b)["swa_es_follower_batches_applied_total"] > f,
        )
        wait_until(
            "in-band digest checks",
            lambda b=base: samples(b)["swa_es_follower_digests_checked_total"] > 0,
        )
        now = samples(base)
        for source in sources:
            assert now[f'swa_es_replica_diverged{{source="{source}"}}'] == 0
        assert now["swa_es_follower_digest_mismatches_total"] == 0
        assert now["swa_es_follower_divergences_total"] == 0
