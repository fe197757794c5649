"""``swa-es follow`` and ``serve`` as real processes, scraped with a real HTTP client: what they
export is what the metric table declares, a caught-up follower has no lag, a snapshot store it
cannot write is counted while it goes on serving, and its routing API counts its requests."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swa_es.cli import EXIT_FAILED
from swa_es.service.metric_table import METRICS
from swa_es.testing.metrics import parse_samples
from tests.swa_es.cli_process import CliProcess

pytestmark = pytest.mark.slow

URL = re.compile(r"(routing API|metrics) on (http://127\.0\.0\.1:\d+)")
DECLARED = {spec.name: spec for spec in METRICS}
WAIT_S = 60.0


def scraped_names(text: str) -> set[str]:
    """The families of a scrape, each checked against its declaration (type and help)."""
    names = set()
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        assert name in DECLARED, f"{name} exported but not declared"
        assert (family.type, family.documentation) == (DECLARED[name].kind, DECLARED[name].help)
        names.add(name)
    return names


def scrape_until(url: str, name: str, holds: Callable[[float], bool]) -> dict[str, float]:
    """Scrape ``url`` until sample ``name`` is there and ``holds``; that scrape's samples."""
    deadline = time.monotonic() + WAIT_S
    while True:
        samples = parse_samples(httpx.get(f"{url}/metrics", timeout=10).text)
        if name in samples and holds(samples[name]):
            return samples
        assert time.monotonic() < deadline, f"{name} never held: {samples.get(name)}"
        time.sleep(0.2)


def put_a_file_at(directory: Path) -> None:
    """Move ``directory`` aside and put a regular file in its place (again if the follower
    recreated the directory in between)."""
    blocker = directory.with_name("blocker")
    blocker.write_text("a file where the snapshot directory was")
    for attempt in range(100):
        if directory.is_dir():
            directory.rename(directory.with_name(f"moved-{attempt}"))
        try:
            blocker.rename(directory)
            return
        except IsADirectoryError:
            continue
    raise AssertionError(f"{directory} kept coming back as a directory")


def test_follow_exports_lag_snapshot_failures_and_routing_metrics(tmp_path: Path) -> None:
    """A follower of a live primary whose snapshot directory becomes a regular file goes on
    following and serving, its failed snapshots counted; once the primary stops and it has
    caught up it is 0 records and 0 seconds behind; its routing API's answers and refusals
    are counted; all it exports is declared."""
    log_dir, snapshots = tmp_path / "log", tmp_path / "snapshots"
    serve = CliProcess("serve", "--log", str(log_dir), "--rate", "100", "--window", "64")
    follow = None
    try:
        serve.wait_for_line(lambda line: "serving as source" in line)
        follow = CliProcess(
            "follow", "--log", str(log_dir), "--snapshots", str(snapshots),
            "--snapshot-every-batches", "5", "--http-port", "0",
        )  # fmt: skip
        start = follow.wait_for_line(lambda line: "following " in line)
        (url,) = [u for name, u in URL.findall(start) if name == "routing API"]
        follow.wait_for_line(lambda line: "ready" in line)
        scrape_until(url, "swa_es_follower_snapshots_written_total", lambda n: n >= 1)
        put_a_file_at(snapshots)
        failing = scrape_until(url, "swa_es_follower_snapshot_failures_total", lambda n: n >= 1)
        scrape_until(
            url,
            "swa_es_follower_batches_applied_total",
            lambda n: n > failing["swa_es_follower_batches_applied_total"],
        )
        assert serve.stop(signal.SIGTERM) == 0, serve.text()
        final = scrape_until(url, "swa_es_follower_lag_records", lambda n: n == 0)
        assert final["swa_es_follower_lag_seconds"] == 0
        with httpx.Client(base_url=url, timeout=10) as client:
            binary = b"".join(t.to_bytes(4, "little") for t in range(1, 65))
            octet = {"content-type": "application/octet-stream"}
            assert client.post("/v1/match", content=binary, headers=octet).status_code == 200
            assert client.post("/v1/match", content=b"{nope").status_code == 400
            sources = client.get("/v1/sources").json()["sources"]
            text = client.get("/metrics").text
        assert sources and all(s["lag_records"] == 0 == s["lag_s"] for s in sources.values())
        names = scraped_names(text)
        samples = parse_samples(text)
        assert samples['swa_es_http_requests_total{code="200",route="/v1/match"}'] == 1
        assert samples['swa_es_http_refusals_total{reason="bad_body"}'] == 1
        assert {"swa_es_build_info", "swa_es_source_state", "swa_es_replica_blocks"} <= names
        assert follow.stop(signal.SIGTERM) == EXIT_FAILED, follow.text()  # the last snapshot
        assert "cannot write a snapshot" in follow.text()
    finally:
        serve.kill()
        if follow is not None:
            follow.kill()


def test_serve_exports_only_declared_metrics(tmp_path: Path) -> None:
    """A primary's scrape: its requests, cache, publisher, HTTP server and build info, each
    declared, and no digest or epoch in a label."""
    serve = CliProcess(
        "serve", "--log", str(tmp_path / "log"), "--rate", "50", "--metrics-port", "0"
    )
    try:
        start = serve.wait_for_line(lambda line: "metrics on " in line)
        (url,) = [u for name, u in URL.findall(start) if name == "metrics"]
        text = httpx.get(f"{url}/metrics", timeout=10).text
        names = scraped_names(text)
        assert {
            "swa_es_primary_requests_total",
            "swa_es_primary_cache_tokens",
            "swa_es_publisher_published_bytes_total",
            "swa_es_build_info",
        } <= names
        assert "digest" not in text.replace("swa_es_", "") and 'epoch="' not in text
        serve.stop(signal.SIGTERM)
    finally:
        serve.kill()
