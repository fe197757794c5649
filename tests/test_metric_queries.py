"""The Prometheus and Grafana files of deploy/ query only what swa-es exports.

Every PromQL expression in ``deploy/prometheus/alerts.yml`` and ``deploy/grafana/swa-es.json``
(and every alert the metric table suggests) names only metrics the metric table declares
(``swa_es.service.metric_table``; a histogram as its ``_bucket``/``_sum``/``_count`` series, a
counter with its ``_total``), or Prometheus's own ``up``; the rules file has the structure
Prometheus loads and holds each alert the table suggests; the scrape config has a job for each
service and loads the rules; and, where Debian's ``promtool`` is installed (``apt-get install
prometheus``), it accepts the config, the rules, and every dashboard query as PromQL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from swa_es.service.metric_table import METRICS

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "swa-es.json"
PROMETHEUS_OWN = frozenset({"up"})
"""Series Prometheus makes itself, which the files may query too."""
EXPORTED = frozenset(name for spec in METRICS for name in spec.series_names)

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
    | {"unless", "offset", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names,
    durations and strings left out)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.groups()
        if call is None and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def test_metric_names_are_read_out_of_promql() -> None:
    """The extraction itself: selectors, not functions, label lists, matchers or durations."""
    expr = (
        'histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{route="/v1/match", '
        'x=~"$y"}[$__rate_interval]))) > 0.05 and on (instance) b_total offset 5m or up == 0'
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "up"}
    assert metric_names('max by (source, state) (c{instance=~"$instance"}) == 1') == {"c"}


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["definition"]
            found = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query)
            assert found is not None, f"variable {variable['name']}: {query}"
            yield f"variable {variable['name']}", found.group(1) or "up"


def every_query() -> list[tuple[str, str]]:
    rules = [(f"alerts.yml {rule['alert']}", rule["expr"]) for rule in alert_rules()]
    suggested = [(f"metric_table {spec.name}", spec.alert) for spec in METRICS if spec.alert]
    return [*rules, *dashboard_queries(), *suggested]


@pytest.mark.parametrize(("where", "expr"), every_query(), ids=[w for w, _ in every_query()])
def test_every_query_names_an_exported_metric(where: str, expr: str) -> None:
    """Each metric a query selects is one the code exports (by the metric table)."""
    names = metric_names(expr)
    assert names, f"{where}: no metric in {expr!r}"
    unknown = sorted(names - EXPORTED - PROMETHEUS_OWN)
    assert not unknown, f"{where}: {unknown} not exported by swa-es (expr {expr!r})"


def test_the_rules_file_has_the_structure_prometheus_loads() -> None:
    """groups -> name and rules; each rule an alert name, a PromQL expr, an optional ``for``
    duration, a severity and a summary; names unique."""
    document = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    assert set(document) == {"groups"}
    names = []
    for group in document["groups"]:
        assert set(group) == {"name", "rules"} and group["rules"], group
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["alert"]), rule["alert"]
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert re.fullmatch(r"\d+[smh]", str(rule.get("for", "0m"))), rule
            assert rule["labels"]["severity"] in {"warning", "critical"}, rule
            assert rule["annotations"]["summary"], rule
            names.append(rule["alert"])
    assert len(names) == len(set(names))


def test_the_rules_hold_every_suggested_alert() -> None:
    """Each alert docs/operations.md suggests (from the table) is a rule, held as long."""
    rules = {" ".join(rule["expr"].split()): str(rule.get("for", "0m")) for rule in alert_rules()}
    for spec in METRICS:
        if spec.alert:
            assert spec.alert in rules, f"alerts.yml has no rule for {spec.name}: {spec.alert}"
            assert rules[spec.alert] == spec.alert_for, spec.name


def test_the_scrape_config_scrapes_every_service_and_loads_the_rules() -> None:
    """A job per service (follow, bridge, serve) reading /metrics, and alerts.yml loaded."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"swa-es-follow", "swa-es-bridge", "swa-es-serve"}
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"
        targets = [t for static in job["static_configs"] for t in static["targets"]]
        assert targets and all(re.fullmatch(r"[\w.-]+:\d+", t) for t in targets), job
    assert "swa-es-.*" in next(r["expr"] for r in alert_rules() if r["alert"] == "SwaEsTargetDown")


def test_the_dashboard_reads_its_datasource_from_a_variable() -> None:
    """The data source is a template variable every panel and query uses, and the panels
    cover what an operator watches."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    selected = set()
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            selected |= metric_names(target["expr"])
    assert {
        "swa_es_replica_blocks",
        "swa_es_replica_tombstones",
        "swa_es_source_state",
        "swa_es_follower_lag_records",
        "swa_es_follower_lag_seconds",
        "swa_es_http_requests_total",
        "swa_es_http_request_duration_seconds_bucket",
        "swa_es_http_refusals_total",
        "swa_es_follower_snapshot_failures_total",
    } <= selected


PROMTOOL = shutil.which("promtool")
_NO_PROMTOOL = "promtool not installed (Debian: apt-get install prometheus)"
if PROMTOOL is None and os.environ.get("SWA_ES_REQUIRE_PROMTOOL") == "1":
    raise RuntimeError(f"SWA_ES_REQUIRE_PROMTOOL=1 (CI sets it) but {_NO_PROMTOOL}")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=_NO_PROMTOOL)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_promtool_accepts_the_config_and_the_rules(tmp_path: Path) -> None:
    """``promtool check config`` (which loads the rules too) and ``check rules``, on a copy of
    deploy/prometheus beside the two files an operator puts there (a bearer token and the CA of
    the servers' certificates: promtool opens both)."""
    shutil.copytree(PROMETHEUS, tmp_path, dirs_exist_ok=True)
    (tmp_path / "swa-es-token").write_text("a-token\n")
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "swa-es-ca.crt"))
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "alerts.yml")):
        done = promtool(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each dashboard query, with Grafana's variables given values, is PromQL promtool
    parses (as the expression of a recording rule)."""
    rules = []
    for index, (_, expr) in enumerate(dashboard_queries()):
        promql = expr.replace("$__rate_interval", "5m").replace("$instance", ".*")
        rules.append({"record": f"swa_es:dashboard_query_{index}", "expr": promql})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = promtool("check", "rules", path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
