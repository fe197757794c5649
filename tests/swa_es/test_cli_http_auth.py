"""``swa-es follow`` with bearer tokens and TLS, as real processes: the routing API and
``/metrics`` speak HTTPS and serve only a named token (``/healthz`` open), a rewritten token
file takes effect without a restart; a non-loopback bind without protection, and a token given
as a flag, are refused at start with an error naming the flags; the token given by
``SWA_ES_HTTP_TOKEN`` is never shown.
"""

from __future__ import annotations

import re
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest
import trustme
import yaml

from swa_es.cli import EXIT_OK, EXIT_USAGE
from swa_es.cli.follow import COMMAND as FOLLOW
from swa_es.cli.settings import build_config
from swa_es.cli.shared_options import Secret
from swa_es.client import RoutingAuthError, RoutingClient
from tests.swa_es.cli_process import CliProcess

REPO = Path(__file__).resolve().parents[2]
TOKEN = "router-a.Zm9vYmFyYmF6cXV4"
NEW_TOKEN = "router-a.bmV3LXRva2VuLTI="
URL = re.compile(r"(routing API|metrics) on (https://127\.0\.0\.1:\d+)")
GUARD_S = 10.0
"""Bound on waiting for the rewritten token file to take effect (looked at once a second)."""


def _write_tokens(path: Path, *tokens: str) -> None:
    scratch = path.with_suffix(".new")
    scratch.write_text("# routers\n" + "".join(f"{t}\n" for t in tokens))
    scratch.chmod(0o600)
    scratch.replace(path)


def _status(url: str, token: str | None, ca: Path) -> int:
    """The status of a match sent with ``token`` (200 when served)."""
    try:
        with RoutingClient(url, token=token, ca_file=ca, timeout_s=GUARD_S) as client:
            client.match([1, 2, 3])
    except RoutingAuthError as refused:
        return refused.status
    return 200


@pytest.mark.slow
def test_follow_serves_https_to_a_named_token_and_rotates_it(tmp_path: Path) -> None:
    """A real follower with --http-token-file and --http-tls-cert/--http-tls-key: both servers
    say https and guard everything but /healthz; the token file rewritten while it runs."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    tokens = tmp_path / "tokens"
    _write_tokens(tokens, TOKEN)
    follow = CliProcess(
        "follow", "--log", str(tmp_path / "log"), "--create-log",
        "--http-port", "0", "--metrics-port", "0", "--http-token-file", str(tokens),
        "--http-tls-cert", str(cert_file), "--http-tls-key", str(key_file),
    )  # fmt: skip
    try:
        start = follow.wait_for_line(lambda line: "following " in line)
        urls = dict(URL.findall(start))
        assert set(urls) == {"routing API", "metrics"}, start
        assert "HTTP access: bearer token, TLS" in start, start
        follow.wait_for_line(lambda line: "ready" in line)
        api = urls["routing API"]
        assert _status(api, TOKEN, ca_file) == 200
        assert _status(api, None, ca_file) == 401
        assert _status(api, NEW_TOKEN, ca_file) == 403
        verify = ssl.create_default_context(cafile=ca_file)
        with httpx.Client(verify=verify, timeout=GUARD_S) as http:
            assert http.get(urls["metrics"] + "/healthz").status_code == 200
            assert http.get(urls["metrics"] + "/metrics").status_code == 401
            scrape = http.get(
                urls["metrics"] + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert 'swa_es_http_refusals_total{reason="forbidden"} 1.0' in scrape.text
        plain = api.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError):
            httpx.get(plain + "/healthz", timeout=GUARD_S)
        _write_tokens(tokens, NEW_TOKEN)
        deadline = time.monotonic() + GUARD_S
        while _status(api, NEW_TOKEN, ca_file) != 200:
            assert time.monotonic() < deadline, "the rewritten token file was not read again"
            time.sleep(0.1)
        assert _status(api, TOKEN, ca_file) == 403
        assert follow.stop(signal.SIGTERM) == EXIT_OK, follow.text()
    finally:
        follow.kill()
    assert TOKEN not in follow.text() and NEW_TOKEN not in follow.text()


def test_a_public_bind_without_protection_is_refused_naming_the_flags(tmp_path: Path) -> None:
    """--http-host 0.0.0.0 with neither token nor TLS: exit 2 before serving, the error naming
    the host flag, the flags that protect it and --http-insecure."""
    follow = CliProcess(
        "follow", "--log", str(tmp_path / "log"), "--create-log",
        "--http-host", "0.0.0.0", "--http-port", "0",
    )  # fmt: skip
    assert follow.wait() == EXIT_USAGE, follow.text()
    error = follow.lines[-1]
    assert error.startswith("swa-es follow: error: --http-host 0.0.0.0: serves other machines")
    assert not (tmp_path / "log").exists()  # refused before anything was opened
    for flag in ("--http-token-file", "SWA_ES_HTTP_TOKEN", "--http-tls-cert", "--http-insecure"):
        assert flag in error, error


def test_a_token_is_taken_from_the_environment_only_and_never_shown() -> None:
    """``SWA_ES_HTTP_TOKEN`` fills the option (shown as hidden in the config's repr); the same
    token as a flag is refused, without echoing it."""
    variables = {"SWA_ES_LOG": "/nonexistent", "SWA_ES_HTTP_TOKEN": f"{TOKEN} {NEW_TOKEN}"}
    config = build_config(FOLLOW, {}, variables)
    secret = config.http_access.token
    assert isinstance(secret, Secret) and secret.reveal() == f"{TOKEN} {NEW_TOKEN}"
    assert TOKEN not in repr(config) and TOKEN not in str(secret)
    assert config.http_access.security().tokens is not None
    assert config.http_access.security().tokens.count == 2
    follow = CliProcess("follow", "--log", "/nonexistent", "--http-token", TOKEN)
    assert follow.wait() == EXIT_USAGE
    assert "--http-token: a secret on the command line is visible" in follow.text()
    assert TOKEN not in follow.text()


def test_the_compose_stack_says_it_serves_its_private_network_unprotected() -> None:
    """Every swa-es service of compose.yaml that binds every interface sets
    SWA_ES_HTTP_INSECURE (else it would refuse to start), as docs/security.md says."""
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    public = {
        name: service["environment"]
        for name, service in compose["services"].items()
        if "0.0.0.0" in (service.get("environment") or {}).values()
    }
    assert public, "no swa-es service binds every interface: the check is stale"
    for name, environment in public.items():
        assert environment.get("SWA_ES_HTTP_INSECURE") == "1", name
    assert "compose stack is a test stack" in (REPO / "docs" / "security.md").read_text()
