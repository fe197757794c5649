"""One CLI grammar: the log named by ``--log`` everywhere (the positional ``LOG`` kept as an
alias), required options marked in usage, global flags before or after the command,
``--version``, seconds named ``-s`` (old spellings and variables still accepted), and every
``SWA_ES_*`` variable meaning one thing in every command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from swa_es.cli import EXIT_OK, EXIT_USAGE, follow, inspect, main, route
from swa_es.cli.main import build_parser, commands, version
from swa_es.cli.settings import build_config, env_name, variables_of
from swa_es.options import Opt
from swa_es.options.values import SettingError

READERS = ("inspect", "route", "snapshot", "restore")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small FileLog of worker-0 and worker-1."""
    directory = tmp_path_factory.mktemp("grammar") / "log"
    for source in ("worker-0", "worker-1"):
        argv = ["serve", "--log", str(directory), "--source", source, "--requests", "5"]
        assert main([*argv, "--window", "64"]) == 0
    return directory


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects among ``text``'s lines."""
    return [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_every_variable_means_one_thing_in_every_command() -> None:
    """Each SWA_ES_* variable (an old name included) is read for one declared option only,
    whichever commands take it: SWA_ES_SOURCE names the source of serve and bridge and no
    longer filters inspect."""
    meanings: dict[str, set[int]] = {}
    names: dict[str, list[str]] = {}
    for command in commands():
        for opt in command.options():
            for variable in variables_of(opt):
                meanings.setdefault(variable, set()).add(id(opt.declaration))
                names.setdefault(variable, []).append(command.name)
    doubled = {v: names[v] for v, declared in meanings.items() if len(declared) > 1}
    assert not doubled, f"variables with more than one meaning: {doubled}"


def test_every_seconds_option_ends_in_s() -> None:
    """Every option taking seconds (metavar S) is spelled --NAME-s; the old spelling is kept
    as a hidden alias."""
    for command in commands():
        for opt in command.options():
            if opt.metavar == "S":
                assert opt.name.endswith("-s"), (command.name, opt.name)


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [
        ("duration", "duration_s", 5.0),
        ("status_every", "status_every_s", 0.5),
        ("snapshot_every", "snapshot_every_s", 7.0),
        ("open_timeout", "log.open_timeout_s", 3.0),
    ],
)
def test_old_spellings_and_variables_still_work(
    tmp_path: Path, old: str, new: str, value: float
) -> None:
    """``--duration`` and SWA_ES_DURATION still set --duration-s; the new variable wins over
    the old one; a bad old value is reported as the user spelled it."""
    flags = {"log": str(tmp_path)}

    def field(config: Any) -> Any:
        for part in new.split("."):
            config = getattr(config, part)
        return config

    assert field(build_config(follow.COMMAND, {**flags, old: str(value)}, {})) == value
    old_variable = env_name(old.replace("_", "-"))
    assert field(build_config(follow.COMMAND, flags, {old_variable: str(value)})) == value
    new_variable = env_name(new.split(".")[-1].replace("_", "-"))
    both = {old_variable: "99", new_variable: str(value)}
    assert field(build_config(follow.COMMAND, flags, both)) == value
    with pytest.raises(SettingError) as caught:
        build_config(follow.COMMAND, {**flags, old: "-1"}, {})
    assert caught.value.what == "--" + old.replace("_", "-")


def test_old_flags_parse_but_help_shows_the_new(capsys: pytest.CaptureFixture[str]) -> None:
    """``serve --duration 1 --open-timeout 5`` parses; serve's help names --duration-s only."""
    args = build_parser().parse_args(["serve", "--log", "/tmp/x", "--duration", "1"])
    assert args.configure(vars(args)).duration_s == 1.0
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    assert "--duration-s S" in text and "--duration " not in text and "--open-timeout S" not in text


@pytest.mark.parametrize("command", READERS)
def test_usage_shows_log_as_a_required_flag(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands that read a log show ``--log URL`` without brackets (required) and no
    positional LOG; optional flags keep their brackets."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    assert " --log URL " in usage and "[--log URL]" not in usage, usage
    assert " LOG" not in usage and "[--open-timeout-s S]" in usage, usage


def test_required_options_are_marked_and_named_when_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bridge's usage shows --source and --zmq as required; missing, one is a one-line usage
    error naming it and its variable."""
    with pytest.raises(SystemExit):
        main(["bridge", "--help"])
    usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    assert " --source ID " in usage and " --zmq ENDPOINT " in usage, usage
    assert main(["bridge", "--log", "/tmp/x", "--source", "a"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err == "swa-es bridge: error: --zmq: is required (or set SWA_ES_ZMQ)"


@pytest.mark.parametrize("command", READERS)
def test_the_log_is_named_by_flag_or_by_position(command: str, tmp_path: Path) -> None:
    """``--log DIR`` and the old positional ``DIR`` build the same config; the two given
    differently is refused."""
    cmd = next(c for c in commands() if c.name == command)
    base: dict[str, object] = {"snapshots": str(tmp_path), "tokens": "1"}
    by_flag = build_config(cmd, {**base, "log": str(tmp_path)}, {})
    by_position = build_config(cmd, {**base, "positional_log": str(tmp_path)}, {})
    assert by_flag == by_position
    with pytest.raises(SettingError, match="given again"):
        build_config(cmd, {**base, "log": str(tmp_path), "positional_log": "/elsewhere"}, {})


def test_route_and_inspect_take_log_as_a_flag(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``route --log`` and ``inspect --log`` (positional only before) answer as the
    positional form does."""
    for argv in (["route", "--tokens", "1,2"], ["inspect", "--brief"]):
        capsys.readouterr()
        assert main([*argv, "--log", str(log_dir)]) == EXIT_OK
        by_flag = capsys.readouterr().out
        assert main([argv[0], str(log_dir), *argv[1:]]) == EXIT_OK
        assert capsys.readouterr().out == by_flag


def test_inspect_filters_by_only_source_and_not_by_the_source_variable(
    log_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--only-source (and the old --source flag) filter inspect; SWA_ES_SOURCE, set for a
    serve or a bridge beside it, no longer does (it made inspect print nothing and say ok)."""
    monkeypatch.setenv("SWA_ES_SOURCE", "worker-9")
    capsys.readouterr()
    assert main(["inspect", "--log", str(log_dir), "--brief"]) == EXIT_OK
    assert {b["source"] for b in json_lines(capsys.readouterr().out)} == {"worker-0", "worker-1"}
    for flag in ("--only-source", "--source"):
        assert main(["inspect", "--log", str(log_dir), "--brief", flag, "worker-1"]) == EXIT_OK
        assert {b["source"] for b in json_lines(capsys.readouterr().out)} == {"worker-1"}
    config = build_config(inspect.COMMAND, {"log": str(log_dir)}, {"SWA_ES_ONLY_SOURCE": "w"})
    assert config.source == "w"


def test_route_prints_the_routing_api_field_names(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per source: cached_tokens, usable_tokens and state (not full_tokens/swa_tokens/known)."""
    capsys.readouterr()
    assert main(["route", "--log", str(log_dir), "--tokens", "0..64"]) == EXIT_OK
    answer = json_lines(capsys.readouterr().out)[-1]
    for match in answer["sources"].values():
        assert set(match) == {"cached_tokens", "usable_tokens", "state"}
        assert match["state"] == "offline"  # both serves stopped, marking themselves offline
    assert route.COMMAND.name == "route"


@pytest.mark.parametrize(
    "argv", [["--version"], ["route", "--version"], ["-v", "--version"], ["inspect", "--version"]]
)
def test_version_before_or_after_the_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``swa-es --version`` (or after a command) prints ``swa-es X.Y.Z`` and exits 0."""
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out.strip()
    assert out == version() and out.startswith("swa-es 0.")


def test_verbose_is_accepted_after_the_command(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``swa-es inspect -v ...`` parses as ``swa-es -v inspect ...`` (it was an unrecognized
    argument); both counts add up."""
    parser = build_parser()
    after = parser.parse_args(["inspect", "-v", "--log", str(log_dir)])
    before = parser.parse_args(["-v", "inspect", "--log", str(log_dir)])
    assert after.verbose + after.verbose_after_command == 1
    assert before.verbose + before.verbose_after_command == 1
    both = parser.parse_args(["-v", "inspect", "-v", "--log", str(log_dir)])
    assert both.verbose + both.verbose_after_command == 2


def test_a_command_default_differs_but_the_option_is_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """demo's --duration-s defaults to 10 s, serve's to no limit: one option (one table row),
    each command's default in its help."""
    demo_opt = next(o for o in commands()[0].options() if o.name == "duration-s")
    serve_opt = next(o for o in commands()[1].options() if o.name == "duration-s")
    assert isinstance(demo_opt, Opt) and demo_opt.declaration is serve_opt.declaration
    assert (demo_opt.default, serve_opt.default) == (10.0, None)
