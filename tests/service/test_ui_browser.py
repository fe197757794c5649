"""The follower's live web view (``/ui``) in a real headless chromium, fed by real publishers.

Real ``swa-es serve`` processes publish to one FileLog (one writer at a time: ``w0``, then
``w1``), a real ``swa-es follow --http-port 0`` serves the page, and Debian's chromium, driven
through ``/usr/bin/chromedriver``, opens it. The API is behind a bearer token: without one the
page says so, with one in its URL's fragment it reads everything. Every source is listed with
its state, the routing API's rate and latency appear once it is asked, a source stopped cleanly
turns ``offline`` on the page within a bounded wait, a router's report to ``/v1/feedback`` shows
in the prediction quality, and the browser logs no console error.

Skipped without chromium and chromedriver (``apt-get install chromium chromium-driver``) unless
``SWA_ES_REQUIRE_BROWSER=1`` (CI sets it). ``SWA_ES_UI_SCREENSHOT=PATH`` saves a screenshot of
the page at its end (docs/ui.png is one).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.compose.services import STARTUP_TIMEOUT_S, Service, follow_service, serve_service

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
_REQUIRED = os.environ.get("SWA_ES_REQUIRE_BROWSER") == "1"
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as ChromeService
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _NO_SELENIUM = ""
except ImportError:  # pragma: no cover - the dev extra installs it
    _NO_SELENIUM = "selenium is not installed (pip install -e '.[dev]')"

_MISSING = _NO_SELENIUM or (
    ""
    if CHROMIUM and CHROMEDRIVER
    else "no chromium or chromedriver (apt-get install chromium chromium-driver)"
)
if _MISSING and _REQUIRED:
    raise RuntimeError(f"SWA_ES_REQUIRE_BROWSER=1 (CI sets it) but {_MISSING}")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(bool(_MISSING), reason=_MISSING or "chromium present"),
]

HEARTBEAT_S = 0.5
PAGE_TIMEOUT_S = 30.0
"""The longest the page may take to show a change (it polls every second)."""
WINDOW = (1280, 800)
TOKEN = "ui-test-token-7f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def http_base(follower: Service) -> str:
    """The follower's routing API, once it has restored."""
    status = follower.wait_for(
        "the routing API", lambda s: bool(s["restored"] and s["http_port"]), STARTUP_TIMEOUT_S
    )
    return f"http://127.0.0.1:{status['http_port']}"


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless chromium at 1280x800 that keeps its console log."""
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=ChromeService(executable_path=CHROMEDRIVER), options=options)
    # the page's viewport itself at WINDOW (a window's size includes its frame)
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        yield driver
    finally:
        driver.quit()


class Traffic:
    """A router asking ``/v1/match`` about 20 times a second from a thread, until stopped."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.answered = 0

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(base_url=self._base, headers=AUTH, timeout=10) as client:
            while not self._stop.wait(0.05):
                reply = client.post("/v1/match", json={"token_ids": list(range(64))})
                if reply.status_code == 200:
                    self.answered += 1


def row_state(driver: Any, source: str) -> str | None:
    """The state the page shows for ``source`` (None: not listed)."""
    rows = driver.find_elements(By.CSS_SELECTOR, f'#sources tr[data-source="{source}"]')
    if not rows:
        return None
    return str(rows[0].find_element(By.CSS_SELECTOR, "td.state").text)


def wait_page(driver: Any, what: str, predicate: Any) -> None:
    """Wait for ``predicate(driver)`` on the page, at most ``PAGE_TIMEOUT_S``."""
    WebDriverWait(driver, PAGE_TIMEOUT_S, poll_frequency=0.2).until(
        predicate, message=f"the page shows no {what} within {PAGE_TIMEOUT_S} s"
    )


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The browser console's errors so far."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_the_live_view_shows_every_source_and_follows_a_stop(tmp_path: Path, browser: Any) -> None:
    log_url = (tmp_path / "log").as_uri()
    timing = ("--heartbeat-s", str(HEARTBEAT_S))
    w0 = serve_service(tmp_path, log_url, "w0", "--rate", "20", *timing).start()
    w1 = serve_service(tmp_path, log_url, "w1", "--rate", "20", *timing)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the routing API's bearer tokens\n{TOKEN}\n")
    follower = follow_service(
        tmp_path,
        log_url,
        "ui",
        *("--http-port", "0", "--source-timeout-s", "60", "--http-token-file", str(tokens)),
    ).start()
    try:
        base = http_base(follower)
        w0.wait_for("requests served", lambda s: s["requests"] > 5, STARTUP_TIMEOUT_S)
        # the page is open to anyone, its data is not: without the token it says so
        browser.get(f"{base}/ui")
        assert browser.current_url == f"{base}/ui/"
        wait_page(browser, "unauthorized", lambda d: "unauthorized" in _text(d, "health"))
        refused = console_errors(browser)  # read, and so cleared: the 401s expected here
        assert refused and all("401" in entry["message"] for entry in refused), refused
        # with the token in the fragment (kept through the redirect) it reads everything
        browser.get(f"{base}/ui#token={TOKEN}")
        assert browser.current_url == f"{base}/ui/#token={TOKEN}"
        wait_page(browser, "w0 exact", lambda d: row_state(d, "w0") == "exact")
        assert browser.find_element(By.ID, "health").text == "ok"

        with Traffic(base) as traffic:
            # the routing API's rate and latency, read from its HTTP metrics
            wait_page(
                browser,
                "a request rate",
                lambda d: d.find_element(By.ID, "rate").text not in ("-", "0.0 req/s"),
            )
            wait_page(browser, "a latency", lambda d: "ms" in d.find_element(By.ID, "latency").text)

            # a clean stop writes an offline marker: the page turns w0 offline
            assert w0.stop() == 0, w0.stderr_tail()
            wait_page(browser, "w0 offline", lambda d: row_state(d, "w0") == "offline")
            note = browser.find_element(By.CSS_SELECTOR, '#sources tr[data-source="w0"] td.note')
            assert "offline marker" in note.text

            # the log's next writer: a second source, listed beside the first
            w1.start()
            wait_page(browser, "w1 exact", lambda d: row_state(d, "w1") == "exact")
            assert row_state(browser, "w0") == "offline"
            wait_page(browser, "w1's blocks", lambda d: "GPU" in _cell(d, "w1", 3))
            assert traffic.answered > 0

            # prediction quality: none reported yet, then a router's report shown
            assert browser.find_element(By.ID, "quality").text == "no feedback reported"
            report = {
                "source": "w1",
                "reused_tokens": 32,
                "prompt_tokens": 64,
                "predicted": {"w1": {"cached_tokens": 48, "usable_tokens": 48}},
            }
            reply = httpx.post(
                f"{base}/v1/feedback", json={"reports": [report]}, headers=AUTH, timeout=10
            )
            assert reply.status_code == 200, reply.text
            wait_page(
                browser,
                "the reported quality",
                lambda d: d.find_elements(By.CSS_SELECTOR, '#quality tr[data-quality="w1"]'),
            )
            screenshot = os.environ.get("SWA_ES_UI_SCREENSHOT")
            if screenshot:
                browser.save_screenshot(screenshot)
        errors = console_errors(browser)
        assert not errors, errors
        assert w1.stop() == 0, w1.stderr_tail()
        assert follower.stop() == 0, follower.stderr_tail()
    finally:
        for service in (w0, w1, follower):
            service.close()


def _text(driver: Any, element_id: str) -> str:
    """The text of the element ``element_id``."""
    return str(driver.find_element(By.ID, element_id).text)


def _cell(driver: Any, source: str, column: int) -> str:
    """The text of ``source``'s row's cell ``column`` (0: the name)."""
    cells = driver.find_elements(By.CSS_SELECTOR, f'#sources tr[data-source="{source}"] td')
    return str(cells[column].text) if len(cells) > column else ""
