"""The settings table: flags over SWA_ES_* variables over defaults, one config per command."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from log import Position
from swa_es.cli import build_parser, main, settings, values
from swa_es.cli.demo import DemoConfig
from swa_es.cli.follow import FollowConfig
from swa_es.cli.inspect import InspectConfig
from swa_es.cli.serve import ServeConfig
from swa_es.cli.settings import SETTINGS, build_config, env_name
from swa_es.cli.values import SettingError

ROOT = Path(__file__).resolve().parents[2]
TABLE = re.compile(
    r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", flags=re.DOTALL
)


def env(**variables: str) -> dict[str, str]:
    """SWA_ES_* variables from keyword names given without the prefix."""
    return {env_name(k): val for k, val in variables.items()}


def demo(flags: dict[str, object] | None = None, **variables: str) -> DemoConfig:
    """The demo's config from ``flags`` and ``variables``."""
    return build_config("demo", DemoConfig, flags or {}, env(**variables))


def test_demo_defaults_are_the_table_defaults(tmp_path: Path) -> None:
    """With nothing set the demo uses 2 workers, 10 s, window 256, page 16 and DATA/log."""
    config = demo({"data": str(tmp_path)})
    assert (config.workers, config.duration_s, config.seed) == (2, 10.0, 0)
    assert (config.cache.window_tokens, config.cache.page_size, config.cache.device) == (
        256,
        16,
        "cpu",
    )
    assert config.log == (tmp_path / "log").resolve().as_uri()


def test_env_sets_a_value_and_a_flag_overrides_it() -> None:
    """SWA_ES_WORKERS sets the worker count unless --workers is given."""
    assert demo(workers="5").workers == 5
    assert demo({"workers": "3"}, workers="5").workers == 3


def test_env_name_maps_dashes_to_underscores() -> None:
    """Setting names map to upper-case variables with the SWA_ES_ prefix."""
    assert env_name("page-size") == "SWA_ES_PAGE_SIZE"


@pytest.mark.parametrize(
    ("flags", "variables", "what"),
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
    flags: dict[str, object], variables: dict[str, str], what: str
) -> None:
    """A bad value raises SettingError naming the flag or variable."""
    with pytest.raises(SettingError) as caught:
        demo(flags, **variables)
    assert caught.value.what == what


def test_required_log_is_reported() -> None:
    """serve without a log names --log and its variable."""
    with pytest.raises(SettingError, match="SWA_ES_LOG"):
        build_config("serve", ServeConfig, {}, {})


def test_positional_settings_are_named_in_upper_case() -> None:
    """A bad positional LOG is reported as LOG, not --log."""
    with pytest.raises(SettingError) as caught:
        build_config("inspect", InspectConfig, {"log": "gopher://x"}, {})
    assert caught.value.what == "LOG"


def test_a_directory_path_means_a_file_log(tmp_path: Path) -> None:
    """A plain directory given as a log becomes a file:// URL."""
    config = build_config("inspect", InspectConfig, {"log": str(tmp_path)}, {})
    assert config.log_url == tmp_path.resolve().as_uri()


def test_a_switch_comes_from_its_flag_or_its_variable(tmp_path: Path) -> None:
    """--brief (stored as "1") and SWA_ES_BRIEF=yes both turn it on; it is off by default."""
    flags: dict[str, Any] = {"log": str(tmp_path)}
    assert not build_config("inspect", InspectConfig, flags, {}).brief
    assert build_config("inspect", InspectConfig, {**flags, "brief": "1"}, {}).brief
    assert build_config("inspect", InspectConfig, flags, env(brief="yes")).brief
    with pytest.raises(SettingError, match="SWA_ES_BRIEF"):
        build_config("inspect", InspectConfig, flags, env(brief="maybe"))


def test_positions_and_token_lists_parse() -> None:
    """--from takes N or P:N lists; --tokens takes lists and A..B ranges."""
    assert values.position("5", "--from") == Position.of({0: 5})
    assert values.position("0:3,1:7", "--from") == Position.of({0: 3, 1: 7})
    assert values.token_list("1,2 3", "--tokens") == (1, 2, 3)
    assert values.token_list("0..4", "--tokens") == (0, 1, 2, 3)
    with pytest.raises(SettingError):
        values.token_list("", "--tokens")
    with pytest.raises(SettingError):
        values.position("0:-1", "--from")


def test_configs_are_frozen(tmp_path: Path) -> None:
    """A config cannot be changed after it was built."""
    config = build_config("follow", FollowConfig, {"log": str(tmp_path)}, {})
    with pytest.raises(AttributeError):
        config.log_url = "x"  # type: ignore[misc]  # the point: frozen


def test_the_process_env_gives_only_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """process_env keeps SWA_ES_* variables and nothing else; env=None reads it."""
    monkeypatch.setenv("SWA_ES_SEED", "9")
    monkeypatch.setenv("UNRELATED_SEED", "1")
    variables = settings.process_env()
    assert variables["SWA_ES_SEED"] == "9"
    assert "UNRELATED_SEED" not in variables
    assert build_config("demo", DemoConfig, {}).seed == 9


def _config_types() -> dict[str, type[Any]]:
    """Each command's config class, read from the parser the CLI builds."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # argparse keeps them here
    found = {}
    for name, command_parser in sub.choices.items():  # type: ignore[union-attr]  # subparsers
        configure = command_parser.get_default("configure")
        found[name] = getattr(configure, "args", (None, None))[1]  # partial(build_config, ..)
    return {name: kind for name, kind in found.items() if kind is not None}


def test_every_config_field_is_a_setting_and_every_setting_a_field() -> None:
    """Each command's config class has exactly the fields its table rows fill."""
    config_types = _config_types()
    assert set(config_types) == set(settings.ALL_BUT_BENCH)
    for command, config_type in config_types.items():
        rows = {s.field for s in settings.settings_of(command)}
        fields = settings.config_fields(config_type)
        assert fields - rows == set(), f"{command}: fields without a setting row"
        assert rows - fields == set(), f"{command}: settings without a config field"


def test_a_setting_appears_once_per_command() -> None:
    """No command takes two rows of the same name, and every row names known commands."""
    known = set(settings.ALL_BUT_BENCH)
    for command in known:
        names = [s.name for s in settings.settings_of(command)]
        assert len(names) == len(set(names)), command
    for row in SETTINGS:
        assert set(row.commands) <= known and set(row.positional_in) <= set(row.commands)


def test_help_shows_each_default_from_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """``swa-es follow --help`` shows the table's default and variable of its settings."""
    with pytest.raises(SystemExit):
        main(["follow", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "snapshots kept (default: 3) [env SWA_ES_KEEP_SNAPSHOTS]" in text


def test_the_documented_configuration_table_is_the_settings_table() -> None:
    """The configuration table of ``docs/configuration.md`` is exactly
    ``settings.configuration_table()``."""
    found = TABLE.search((ROOT / "docs" / "configuration.md").read_text())
    assert found is not None, "docs/configuration.md lacks the settings-table markers"
    expected = settings.configuration_table()
    assert found.group(1) == expected, (
        "docs/configuration.md's table is stale; run `.venv/bin/python tools/settings_table.py` "
        "or paste:\n" + expected
    )
