"""Prometheus scraping the running compose stack (``bash tools/compose.sh test``), checked
through Prometheus's own HTTP API on 127.0.0.1:9090 (``tests.compose.prometheus_api``).

The ``prometheus`` service (Debian's package, docker/prometheus/) scrapes both followers on
their routing port, both primaries on their metrics port and the bridge where it runs, every 2
seconds, and evaluates deploy/prometheus/alerts.yml. With the primaries publishing: every
target Prometheus has is up, and each follower is among them; Prometheus holds
``swa_es_replica_blocks`` above zero for every primary's source on both followers and
``swa_es_follower_lag_records`` of both; and every alert of the rules file operators get is
loaded and evaluates without error.

Like the other stack scenarios it skips outside the stack (and fails under
``SWA_ES_REQUIRE_COMPOSE=1``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.compose import prometheus_api, stack
from tests.compose.test_stack import running_stack

pytestmark = [pytest.mark.compose, pytest.mark.timeout(600)]

__all__ = ["running_stack"]  # the module fixture: skip (or fail) without the stack

ALERTS_FILE = stack.ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_GROUP = "swa-es"
FOLLOW_JOB = "swa-es-follow"
SERVE_JOB = "swa-es-serve"
WAIT_S = 120.0
"""Bound on each wait: a few 2 s scrape and evaluation intervals, with a loaded machine's slack."""


def alert_names(path: Path = ALERTS_FILE) -> set[str]:
    """The alerts of a rules file."""
    groups = yaml.safe_load(path.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def expected_targets() -> dict[str, set[str]]:
    """Job -> the instances Prometheus must scrape in the stack (docker/prometheus)."""
    return {
        FOLLOW_JOB: {f"{name}:{stack.ROUTING_PORT}" for name in stack.FOLLOWERS},
        SERVE_JOB: {f"{name}:{stack.METRICS_PORT}" for name in stack.PRIMARIES},
    }


def all_targets_up() -> dict[str, set[str]] | None:
    """Job -> instances, once every active target is up and the expected ones are there."""
    targets = prometheus_api.active_targets()
    if any(target["health"] != "up" for target in targets):
        return None
    jobs: dict[str, set[str]] = {}
    for target in targets:
        jobs.setdefault(target["labels"]["job"], set()).add(target["labels"]["instance"])
    for job, instances in expected_targets().items():
        if not instances <= jobs.get(job, set()):
            return None
    return jobs


def blocks_by_follower(sources: set[str]) -> dict[str, dict[str, float]] | None:
    """Follower instance -> source -> ``swa_es_replica_blocks``, once Prometheus holds a value
    above zero for every source on every follower."""
    samples = prometheus_api.query(f'swa_es_replica_blocks{{job="{FOLLOW_JOB}"}}')
    found: dict[str, dict[str, float]] = {}
    for sample in samples:
        found.setdefault(sample.labels["instance"], {})[sample.labels["source"]] = sample.value
    for instance in expected_targets()[FOLLOW_JOB]:
        held = found.get(instance, {})
        if not all(held.get(source, 0.0) > 0 for source in sources):
            return None
    return found


def lag_by_follower() -> dict[str, float] | None:
    """Follower instance -> ``swa_es_follower_lag_records``, once both are there."""
    samples = prometheus_api.query(f'swa_es_follower_lag_records{{job="{FOLLOW_JOB}"}}')
    lag = {sample.labels["instance"]: sample.value for sample in samples}
    return lag if set(lag) >= expected_targets()[FOLLOW_JOB] else None


def rules_evaluated(names: set[str]) -> dict[str, Any] | None:
    """The ``swa-es`` rule group, once it holds every alert of ``names`` and each has been
    evaluated without error (health ``ok``)."""
    for group in prometheus_api.rule_groups():
        if group["name"] != RULE_GROUP:
            continue
        rules = {rule["name"]: rule for rule in group["rules"]}
        errors = {name: rule["lastError"] for name, rule in rules.items() if rule.get("lastError")}
        assert not errors, f"alert rules failing in Prometheus: {errors}"
        if set(rules) >= names and all(rules[name]["health"] == "ok" for name in names):
            return group
    return None


def test_prometheus_scrapes_the_stack_and_loads_the_alert_rules() -> None:
    """Prometheus's API: every target up (both followers and both primaries among them), the
    followers' replica blocks of every primary's source above zero and their lag in records,
    and every alert of deploy/prometheus/alerts.yml loaded and evaluated without error."""
    stack.start_primaries()
    sources = set()
    for primary in stack.PRIMARIES:
        now = stack.status(primary)
        assert now is not None, f"{primary}: no status"
        sources.add(str(now["source"]))
    jobs = stack.wait_for("every Prometheus target up", all_targets_up, WAIT_S)
    blocks = stack.wait_for(
        f"swa_es_replica_blocks > 0 for {sorted(sources)} on both followers",
        lambda: blocks_by_follower(sources),
        WAIT_S,
    )
    lag = stack.wait_for("swa_es_follower_lag_records of both followers", lag_by_follower, WAIT_S)
    assert all(value >= 0 for value in lag.values()), lag
    names = alert_names()
    assert names, f"no alerts in {ALERTS_FILE}"
    group = stack.wait_for(
        f"the {len(names)} alerts of {ALERTS_FILE.name} evaluated",
        lambda: rules_evaluated(names),
        WAIT_S,
    )
    assert Path(group["file"]).name == ALERTS_FILE.name, group["file"]
    up = {job: sorted(instances) for job, instances in jobs.items()}
    print(
        f"scenario prometheus: targets up {up}; "
        f"swa_es_replica_blocks {blocks}; swa_es_follower_lag_records {lag}; "
        f"{len(names)} alert rules of {group['file']} evaluated, health ok"
    )
