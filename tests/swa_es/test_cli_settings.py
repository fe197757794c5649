"""Options declared on the configs: flags over SWA_ES_* variables over defaults, one config per
command, the help and the documented table derived from the declarations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from log import Position
from swa_es.cli import demo as demo_command
from swa_es.cli import follow, inspect, main, serve, settings
from swa_es.cli.demo import DemoConfig
from swa_es.cli.main import commands
from swa_es.cli.settings import Command, build_config, env_name
from swa_es.cli.shared_options import LOG
from swa_es.egress.config import EgressConfig
from swa_es.options import FieldError, nested, option, values
from swa_es.options.values import SettingError

ROOT = Path(__file__).resolve().parents[2]
TABLE = re.compile(
    r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", flags=re.DOTALL
)


def env(**variables: str) -> dict[str, str]:
    """SWA_ES_* variables from keyword names given without the prefix."""
    return {env_name(k): val for k, val in variables.items()}


def demo(flags: dict[str, object] | None = None, **variables: str) -> DemoConfig:
    """The demo's config from ``flags`` and ``variables``."""
    config: DemoConfig = build_config(demo_command.COMMAND, flags or {}, env(**variables))
    return config


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
        build_config(serve.COMMAND, {}, {})


def test_positional_settings_are_named_in_upper_case() -> None:
    """A bad positional LOG is reported as LOG, a bad --log as --log."""
    with pytest.raises(SettingError) as caught:
        build_config(inspect.COMMAND, {settings.positional_dest(LOG): "gopher://x"}, {})
    assert caught.value.what == "LOG"
    with pytest.raises(SettingError) as caught:
        build_config(inspect.COMMAND, {"log": "gopher://x"}, {})
    assert caught.value.what == "--log"


def test_a_directory_path_means_a_file_log(tmp_path: Path) -> None:
    """A plain directory given as a log becomes a file:// URL."""
    config = build_config(inspect.COMMAND, {"log": str(tmp_path)}, {})
    assert config.log.url == tmp_path.resolve().as_uri()


def test_a_switch_comes_from_its_flag_or_its_variable(tmp_path: Path) -> None:
    """--brief (stored as "1") and SWA_ES_BRIEF=yes both turn it on; it is off by default."""
    flags: dict[str, Any] = {"log": str(tmp_path)}
    assert not build_config(inspect.COMMAND, flags, {}).brief
    assert build_config(inspect.COMMAND, {**flags, "brief": "1"}, {}).brief
    assert build_config(inspect.COMMAND, flags, env(brief="yes")).brief
    with pytest.raises(SettingError, match="SWA_ES_BRIEF"):
        build_config(inspect.COMMAND, flags, env(brief="maybe"))


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
    config = build_config(follow.COMMAND, {"log": str(tmp_path)}, {})
    with pytest.raises(AttributeError):
        config.log = config.log  # the point: frozen


def test_the_process_env_gives_only_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """process_env keeps SWA_ES_* variables and nothing else; env=None reads it."""
    monkeypatch.setenv("SWA_ES_SEED", "9")
    monkeypatch.setenv("UNRELATED_SEED", "1")
    variables = settings.process_env()
    assert variables["SWA_ES_SEED"] == "9"
    assert "UNRELATED_SEED" not in variables
    assert build_config(demo_command.COMMAND, {}).seed == 9


def test_every_command_declares_each_option_once() -> None:
    """Every config field is an option or a group, no command takes a name twice, and every
    positional argument is one of the command's options (``Command.options`` checks)."""
    for command in commands():
        names = [opt.name for opt in command.options()]
        assert len(names) == len(set(names)), command.name
        assert (command.config_type is None) == (command.name == "bench")


def test_a_field_without_a_declaration_is_refused() -> None:
    """A config field declared with neither option() nor nested() is a TypeError naming it."""

    @dataclass(frozen=True)
    class Loose:
        plain: int = 3

    with pytest.raises(TypeError, match=r"Loose\.plain"):
        Command("loose", Loose).options()


def test_an_optional_group_is_none_until_its_required_options_are_given(tmp_path: Path) -> None:
    """follow's stream out (EgressConfig itself) is off without --zmq-publish, and built from
    the --zmq-* flags and variables with it; only then do its replicas keep token ids."""
    flags: dict[str, object] = {"log": str(tmp_path)}
    quiet = build_config(follow.COMMAND, flags, env(zmq_format="vllm"))
    assert quiet.egress is None
    assert not follow.follower_views(quiet).replicas.keeps_tokens
    config = build_config(
        follow.COMMAND, {**flags, "zmq_publish": "ipc:///tmp/x"}, env(zmq_format="vllm")
    )
    assert config.egress == EgressConfig(publish_endpoint="ipc:///tmp/x", wire_format="vllm")
    assert follow.follower_views(config).replicas.keeps_tokens


def test_a_flag_of_an_optional_group_without_its_required_option_is_refused(
    tmp_path: Path,
) -> None:
    """--zmq-tombstones without --zmq-publish would be silently unused: a SettingError names
    the flag and what it needs (a variable alone stays unused: it may be set for every
    command)."""
    flags: dict[str, object] = {"log": str(tmp_path), "zmq_tombstones": "remove"}
    with pytest.raises(
        SettingError,
        match=r"--zmq-tombstones: takes effect only with --zmq-publish \(or SWA_ES_ZMQ_PUBLISH\)",
    ):
        build_config(follow.COMMAND, flags, env())


def test_a_group_refusing_a_value_is_reported_under_the_flag_or_variable() -> None:
    """A FieldError of a group config names the flag or the variable that gave the value."""

    @dataclass(frozen=True, kw_only=True)
    class Pair:
        low: int = option("low", values.positive_int, "low", default=1)
        high: int = option("high", values.positive_int, "high", default=2)

        def __post_init__(self) -> None:
            if self.high < self.low:
                raise FieldError("high", "below --low")

    @dataclass(frozen=True, kw_only=True)
    class Outer:
        pair: Pair = nested(Pair)

    command = Command("pair", Outer)
    with pytest.raises(SettingError) as caught:
        build_config(command, {"low": "5"}, {})
    assert caught.value.what == "--high"
    with pytest.raises(SettingError) as caught:
        build_config(command, {"low": "5"}, {"SWA_ES_HIGH": "4"})
    assert caught.value.what == "SWA_ES_HIGH"


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
    expected = settings.configuration_table(commands())
    assert found.group(1) == expected, (
        "docs/configuration.md's table is stale; run `.venv/bin/python tools/settings_table.py` "
        "or paste:\n" + expected
    )
