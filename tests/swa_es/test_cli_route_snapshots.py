"""``swa-es route``, ``snapshot`` and ``restore`` against a log written by ``swa-es serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from swa_es.cli import main
from swa_es.engine.engine import CacheConfig, SyntheticEngine, synthetic_engine

REQUESTS = 40
CACHE = CacheConfig(full_size=32768, swa_size=8192, window_tokens=64, page_size=16, device="cpu")
CACHE_FLAGS = ["--window", "64", "--page-size", "16", "--seed", "3"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SyntheticEngine]:
    """A log written by ``swa-es serve`` and an in-process twin of that primary."""
    directory = tmp_path_factory.mktemp("served")
    argv = ["serve", "--log", str(directory / "log"), "--requests", str(REQUESTS), *CACHE_FLAGS]
    assert main(argv) == 0
    twin = synthetic_engine(CACHE, seed=3)
    for _ in range(REQUESTS):
        twin.step()
    return directory, twin


def last_json(text: str) -> dict[str, Any]:
    """The last JSON line of a command's output."""
    value = orjson.loads(text.strip().splitlines()[-1])
    assert isinstance(value, dict)
    return value


def test_route_answers_what_the_primary_would_match(
    served: tuple[Path, SyntheticEngine], capsys: pytest.CaptureFixture[str]
) -> None:
    """For a system prompt plus a suffix, route reports the primary's own match lengths."""
    directory, twin = served
    capsys.readouterr()
    workload_prompt = twin.workload.system_prompts[0]  # the most popular system prompt
    tokens = [*workload_prompt, 1, 2, 3]
    expected_swa = len(twin.cache.match_prefix(tokens).indices)
    text = ",".join(map(str, tokens))
    assert main(["route", str(directory / "log"), "--tokens", text]) == 0
    answer = last_json(capsys.readouterr().out)
    match = answer["sources"]["worker-0"]
    assert match["usable_tokens"] == expected_swa
    assert match["cached_tokens"] >= expected_swa > 0
    assert match["state"] == "offline"  # serve marked itself offline when it stopped
    assert answer["best"] == "worker-0"


def test_route_with_unknown_tokens_matches_nothing(
    served: tuple[Path, SyntheticEngine], capsys: pytest.CaptureFixture[str]
) -> None:
    """Tokens no request ever used match no prefix: no best source."""
    directory, _ = served
    capsys.readouterr()
    assert main(["route", str(directory / "log"), "--tokens", "31990..32000"]) == 0
    answer = last_json(capsys.readouterr().out)
    assert answer["best"] is None


def test_snapshot_then_restore_rebuilds_the_primary(
    served: tuple[Path, SyntheticEngine], capsys: pytest.CaptureFixture[str]
) -> None:
    """snapshot writes the views at the log's end; restore loads it, replays no tail, and both
    report the primary's digest."""
    directory, twin = served
    snapshots = directory / "snapshots"
    capsys.readouterr()
    assert main(["snapshot", str(directory / "log"), "--snapshots", str(snapshots)]) == 0
    written = last_json(capsys.readouterr().out)
    assert written["sources"]["worker-0"]["digest"] == twin.cache.state_digest()
    assert main(["restore", str(directory / "log"), "--snapshots", str(snapshots)]) == 0
    restored = last_json(capsys.readouterr().out)
    assert restored["snapshot"] == written["snapshot"]
    assert restored["records_replayed"] == 0
    assert restored["sources"] == written["sources"]


def test_restore_without_snapshots_replays_everything(
    served: tuple[Path, SyntheticEngine], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With an empty snapshot directory restore replays the whole log and still matches."""
    directory, twin = served
    capsys.readouterr()
    assert main(["restore", str(directory / "log"), "--snapshots", str(tmp_path)]) == 0
    restored = last_json(capsys.readouterr().out)
    assert restored["snapshot"] is None
    assert restored["records_replayed"] > 0
    assert restored["sources"]["worker-0"]["digest"] == twin.cache.state_digest()


def test_route_takes_a_snapshot_store_url_like_every_command(
    served: tuple[Path, SyntheticEngine], capsys: pytest.CaptureFixture[str]
) -> None:
    """``route --snapshots`` takes what ``snapshot`` writes to, as a ``file://`` URL or a path,
    and answers as it does from the whole log; a store of an unknown scheme is a usage error."""
    directory, twin = served
    store = directory / "route-store"
    tokens = ",".join(map(str, [*twin.workload.system_prompts[0], 1, 2, 3]))
    log = str(directory / "log")
    assert main(["snapshot", log, "--snapshots", store.as_uri()]) == 0
    capsys.readouterr()
    assert main(["route", log, "--tokens", tokens]) == 0
    from_log = last_json(capsys.readouterr().out)
    for given in (store.as_uri(), str(store)):
        assert main(["route", log, "--tokens", tokens, "--snapshots", given]) == 0
        assert last_json(capsys.readouterr().out) == from_log
    assert main(["route", log, "--tokens", tokens, "--snapshots", "ftp://host/x"]) == 2
    assert "unknown snapshot store scheme 'ftp'" in capsys.readouterr().err
