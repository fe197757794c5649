"""Prometheus's own HTTP API (``/api/v1``), asked over the port compose.yaml publishes on the
host (127.0.0.1:9090), with a real HTTP client (the standard library's).

Each call returns the ``data`` of a ``"status": "success"`` answer; anything else (a refused
connection, an HTTP error, an ``error`` answer) raises, naming the URL, so ``stack.wait_for``
can retry while Prometheus starts.
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

PROMETHEUS_URL = "http://127.0.0.1:9090"
"""Where the compose stack's Prometheus answers on the host (compose.yaml, ``prometheus``)."""
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels and its value."""

    labels: dict[str, str]
    value: float


def api(path: str, base_url: str = PROMETHEUS_URL, **params: str) -> Any:
    """The ``data`` of ``GET /api/v1/PATH?PARAMS``."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    url = f"{base_url}/api/v1/{path}{query}"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        answer = json.loads(response.read().decode())
    if answer.get("status") != "success":
        raise AssertionError(f"{url} answered {answer}")
    return answer["data"]


def active_targets(base_url: str = PROMETHEUS_URL) -> list[dict[str, Any]]:
    """``/api/v1/targets``: every target Prometheus scrapes now, with its job, health and
    last error."""
    data = api("targets", base_url, state="active")
    return list(data["activeTargets"])


def query(promql: str, base_url: str = PROMETHEUS_URL) -> list[Sample]:
    """``/api/v1/query``: the instant vector ``promql`` evaluates to now."""
    data = api("query", base_url, query=promql)
    if data["resultType"] != "vector":
        raise AssertionError(f"{promql!r} is a {data['resultType']}, not an instant vector")
    samples = []
    for item in data["result"]:
        value = float(item["value"][1])
        if math.isnan(value):
            raise AssertionError(f"{promql!r}: NaN for {item['metric']}")
        samples.append(Sample(dict(item["metric"]), value))
    return samples


def rule_groups(base_url: str = PROMETHEUS_URL) -> list[dict[str, Any]]:
    """``/api/v1/rules``: the rule groups Prometheus loaded, each rule with its health."""
    return list(api("rules", base_url)["groups"])
