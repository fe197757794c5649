"""Configuration of the CLI commands: flags over SWA_ES_* variables over defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from log import Position
from swa_es.cli import config as cfg
from swa_es.cli.config import SettingError, Sources


def sources(flags: dict[str, object] | None = None, **env: str) -> Sources:
    """Sources with ``flags`` and ``env`` (keys given without the SWA_ES_ prefix)."""
    return Sources(flags=flags or {}, env={cfg.env_name(k): v for k, v in env.items()})


def test_demo_defaults_are_documented_values(tmp_path: Path) -> None:
    """With nothing set the demo uses 2 workers, 10 s, window 256, page 16 and its data dir."""
    config = cfg.demo_config(sources({"data": str(tmp_path)}))
    assert (config.workers, config.duration_s, config.seed) == (2, 10.0, 0)
    assert (config.cache.window_tokens, config.cache.page_size, config.cache.device) == (
        256,
        16,
        "cpu",
    )
    assert config.log_url == (tmp_path / "log").resolve().as_uri()


def test_env_sets_a_value_and_a_flag_overrides_it() -> None:
    """SWA_ES_WORKERS sets the worker count unless --workers is given."""
    assert cfg.demo_config(sources(workers="5")).workers == 5
    assert cfg.demo_config(sources({"workers": "3"}, workers="5")).workers == 3


def test_env_name_maps_dashes_to_underscores() -> None:
    """Setting names map to upper-case variables with the SWA_ES_ prefix."""
    assert cfg.env_name("page-size") == "SWA_ES_PAGE_SIZE"


@pytest.mark.parametrize(
    ("flags", "env", "what"),
    [
        ({"workers": "0"}, {}, "--workers"),
        ({}, {"page_size": "x"}, "SWA_ES_PAGE_SIZE"),
        ({"duration": "-1"}, {}, "--duration"),
        ({"device": "tpu"}, {}, "--device"),
        ({"full_size": "100"}, {}, "--full-size"),
        ({"log": "ftp://host/x"}, {}, "--log"),
    ],
)
def test_bad_values_name_where_they_came_from(
    flags: dict[str, object], env: dict[str, str], what: str
) -> None:
    """A bad value raises SettingError naming the flag or variable."""
    with pytest.raises(SettingError) as caught:
        cfg.demo_config(sources(flags, **env))
    assert caught.value.what == what


def test_required_log_is_reported() -> None:
    """serve without a log names --log and its variable."""
    with pytest.raises(SettingError, match="SWA_ES_LOG"):
        cfg.serve_config(sources())


def test_positional_settings_are_named_in_upper_case() -> None:
    """A bad positional LOG is reported as LOG, not --log."""
    src = Sources(flags={"log": "gopher://x"}, env={}, positional=frozenset({"log"}))
    with pytest.raises(SettingError) as caught:
        cfg.inspect_config(src)
    assert caught.value.what == "LOG"


def test_a_directory_path_means_a_file_log(tmp_path: Path) -> None:
    """A plain directory given as a log becomes a file:// URL."""
    config = cfg.inspect_config(sources({"log": str(tmp_path)}))
    assert config.log_url == tmp_path.resolve().as_uri()


def test_positions_and_token_lists_parse() -> None:
    """--from takes N or P:N lists; --tokens takes lists and A..B ranges."""
    assert cfg.position("5", "--from") == Position.of({0: 5})
    assert cfg.position("0:3,1:7", "--from") == Position.of({0: 3, 1: 7})
    assert cfg.token_list("1,2 3", "--tokens") == (1, 2, 3)
    assert cfg.token_list("0..4", "--tokens") == (0, 1, 2, 3)
    with pytest.raises(SettingError):
        cfg.token_list("", "--tokens")
    with pytest.raises(SettingError):
        cfg.position("0:-1", "--from")


def test_configs_are_frozen(tmp_path: Path) -> None:
    """A config cannot be changed after it was built."""
    config = cfg.follow_config(sources({"log": str(tmp_path)}))
    with pytest.raises(AttributeError):
        config.log_url = "x"  # type: ignore[misc]  # the point: frozen


def test_from_process_reads_only_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources.from_process keeps SWA_ES_* variables and nothing else."""
    monkeypatch.setenv("SWA_ES_SEED", "9")
    monkeypatch.setenv("UNRELATED_SEED", "1")
    src = Sources.from_process({})
    assert src.env["SWA_ES_SEED"] == "9"
    assert "UNRELATED_SEED" not in src.env
    assert cfg.demo_config(src).seed == 9
