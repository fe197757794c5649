"""The registry of log schemes: ``open_log`` opens what it lists, the command line accepts what
it lists, and a registered scheme reaches both."""

from __future__ import annotations

from typing import Any

import pytest

import log.opening
from log import ConfigError, EventLog, LogScheme, MemoryLog, log_schemes, open_log, register_scheme
from swa_es.options import values


def test_the_built_in_schemes() -> None:
    assert [scheme.name for scheme in log_schemes()] == ["file", "kafka", "memory"]


async def test_a_registered_scheme_is_opened_and_accepted_by_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(log.opening, "_SCHEMES", dict(log.opening._SCHEMES))
    opened: list[tuple[str, str, dict[str, Any]]] = []

    async def open_probe(netloc: str, path: str, options: dict[str, Any]) -> EventLog:
        opened.append((netloc, path, options))
        return MemoryLog(name=netloc)

    register_scheme(LogScheme("probe", "probe://name", open_probe))
    async with await open_log("probe://here/x?a=1", b=2) as probe:
        assert isinstance(probe, MemoryLog)
    assert opened == [("here", "/x", {"a": "1", "b": 2})]
    assert values.log_url("probe://here", "--log") == "probe://here"
    with pytest.raises(ValueError, match="already registered"):
        register_scheme(LogScheme("probe", "probe://name", open_probe))


async def test_an_unknown_scheme_names_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown scheme 'ftp'.*file:///dir, kafka://"):
        await open_log("ftp://host/x")
    with pytest.raises(values.SettingError, match=r"unknown log scheme 'ftp'.*file, kafka, memory"):
        values.log_url("ftp://host/x", "--log")
