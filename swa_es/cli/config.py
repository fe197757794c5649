"""Configuration of every ``swa-es`` command: flags first, then ``SWA_ES_*`` variables, then
defaults.

This is the only module that reads ``SWA_ES_*`` environment variables. Each command gets one
frozen config object built here, once, at the edge; the code that runs a command never looks at
the environment. A bad value raises ``SettingError`` naming the flag or variable it came from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import urlsplit

from platformdirs import user_cache_dir

from log.position import Position
from swa_es.engine.engine import CacheConfig

T = TypeVar("T")

ENV_PREFIX: Final = "SWA_ES_"
DEVICES: Final = ("cpu", "cuda")


class SettingError(ValueError):
    """A flag or ``SWA_ES_*`` variable has a bad value; ``what`` names where it came from."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what}: {reason}")


# --- where values come from --------------------------------------------------------------------


def env_name(setting: str) -> str:
    """The environment variable of a setting: ``page-size`` -> ``SWA_ES_PAGE_SIZE``."""
    return ENV_PREFIX + setting.upper().replace("-", "_")


@dataclass(frozen=True, slots=True)
class Sources:
    """The raw values a command was given: parsed flags (``None`` = not given) and the env."""

    flags: Mapping[str, object]
    env: Mapping[str, str]
    positional: frozenset[str] = frozenset()

    @classmethod
    def from_process(
        cls, flags: Mapping[str, object], positional: frozenset[str] = frozenset()
    ) -> Sources:
        """Flags plus this process's ``SWA_ES_*`` variables (read here, once); ``positional``
        names settings given as positional arguments (named ``LOG`` rather than ``--log``)."""
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
        return cls(flags=flags, env=env, positional=positional)

    def where(self, setting: str) -> str:
        """How the user names a setting on the command line."""
        return setting.upper() if setting in self.positional else "--" + setting

    def get(self, setting: str, parse: Callable[[str, str], T], default: T) -> T:
        """The setting's value from its flag, else its variable, else ``default``."""
        flag = self.flags.get(setting.replace("-", "_"))
        if flag is not None:
            return parse(str(flag), self.where(setting))
        variable = env_name(setting)
        if variable in self.env:
            return parse(self.env[variable], variable)
        return default

    def optional(self, setting: str, parse: Callable[[str, str], T]) -> T | None:
        """Like ``get`` with no default: ``None`` when neither flag nor variable is set."""
        return self.get(setting, parse, None)


# --- parsers: (text, where) -> value -----------------------------------------------------------


def positive_int(text: str, where: str) -> int:
    """An int >= 1."""
    value = _int(text, where)
    if value < 1:
        raise SettingError(where, f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str, where: str) -> int:
    """An int >= 0."""
    value = _int(text, where)
    if value < 0:
        raise SettingError(where, f"must not be negative, got {value}")
    return value


def port(text: str, where: str) -> int:
    """A TCP port (0 = pick a free one)."""
    value = _int(text, where)
    if not 0 <= value <= 65535:
        raise SettingError(where, f"must be a TCP port 0..65535, got {value}")
    return value


def positive_float(text: str, where: str) -> float:
    """A float > 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise SettingError(where, f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise SettingError(where, f"must be a positive finite number, got {text!r}")
    return value


def device(text: str, where: str) -> str:
    """A torch device name: ``cpu``, ``cuda`` or ``cuda:N``."""
    base = text.split(":", 1)[0]
    if base not in DEVICES or (":" in text and not text.split(":", 1)[1].isdigit()):
        raise SettingError(where, f"expected cpu, cuda or cuda:N, got {text!r}")
    return text


def text_value(text: str, where: str) -> str:
    """A non-empty string."""
    if not text.strip():
        raise SettingError(where, "must not be empty")
    return text


def path(text: str, where: str) -> Path:
    """A filesystem path (``~`` expanded)."""
    return Path(text_value(text, where)).expanduser()


def log_url(text: str, where: str) -> str:
    """A log URL (``file://``, ``kafka://``, ``memory://``), or a directory path meaning a
    FileLog there."""
    text = text_value(text, where)
    scheme = urlsplit(text).scheme
    if not scheme:
        return Path(text).expanduser().resolve().as_uri()
    if scheme not in ("file", "kafka", "memory"):
        raise SettingError(where, f"unknown log scheme {scheme!r} in {text!r} (file, kafka)")
    return text


def token_list(text: str, where: str) -> tuple[int, ...]:
    """Token ids separated by commas or spaces, or ``A..B`` for the range A..B-1."""
    tokens: list[int] = []
    for part in text.replace(",", " ").split():
        low, dots, high = part.partition("..")
        if dots:
            tokens.extend(range(_int(low, where), _int(high, where)))
        else:
            tokens.append(_int(part, where))
    if not tokens:
        raise SettingError(where, "no token ids given")
    if any(not 0 <= t < 2**32 for t in tokens):
        raise SettingError(where, "token ids must be in 0..2**32-1")
    return tuple(tokens)


def position(text: str, where: str) -> Position:
    """A log position: ``N`` (offset N of partition 0) or ``P:N,P:N`` (per partition)."""
    pairs: dict[int, int] = {}
    for part in text.split(","):
        partition, colon, offset = part.strip().rpartition(":")
        pairs[_int(partition, where) if colon else 0] = _int(offset, where)
    try:
        return Position.of(pairs)
    except ValueError as exc:
        raise SettingError(where, str(exc)) from None


def _int(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SettingError(where, f"expected an integer, got {text!r}") from None


# --- the configs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """``swa-es demo``."""

    data_dir: Path
    log_url: str
    workers: int
    duration_s: float
    seed: int
    cache: CacheConfig
    refresh_s: float
    open_timeout_s: float


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """``swa-es serve``: one primary."""

    log_url: str
    source: str
    seed: int
    cache: CacheConfig
    duration_s: float | None
    max_requests: int | None
    rate_rps: float | None
    metrics_host: str
    metrics_port: int | None
    status_file: Path | None
    status_every_s: float
    open_timeout_s: float


@dataclass(frozen=True, slots=True)
class FollowConfig:
    """``swa-es follow``: one long-running follower."""

    log_url: str
    snapshot_dir: Path | None
    snapshot_every_batches: int
    snapshot_every_s: float
    keep_snapshots: int
    metrics_host: str
    metrics_port: int | None
    status_file: Path | None
    status_every_s: float
    duration_s: float | None
    open_timeout_s: float


@dataclass(frozen=True, slots=True)
class InspectConfig:
    """``swa-es inspect``."""

    log_url: str
    start: Position | None
    source: str | None
    limit: int | None
    brief: bool
    open_timeout_s: float


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """``swa-es route``."""

    log_url: str
    tokens: tuple[int, ...]
    extra_key: str | None
    snapshot_dir: Path | None
    open_timeout_s: float


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    """``swa-es snapshot`` and ``swa-es restore``."""

    log_url: str
    snapshot_dir: Path
    open_timeout_s: float


def default_data_dir() -> Path:
    """Where the demo keeps its log and snapshots unless told otherwise."""
    return Path(user_cache_dir("swa-es")) / "demo"


def _cache(src: Sources) -> CacheConfig:
    page_size = src.get("page-size", positive_int, 16)
    config = CacheConfig(
        full_size=src.get("full-size", positive_int, 32768),
        swa_size=src.get("swa-size", positive_int, 8192),
        window_tokens=src.get("window", positive_int, 256),
        page_size=page_size,
        device=src.get("device", device, "cpu"),
    )
    for name, size in (("full-size", config.full_size), ("swa-size", config.swa_size)):
        if size % page_size:
            raise SettingError("--" + name, f"{size} is not a multiple of the page size")
    return config


def _open_timeout(src: Sources) -> float:
    return src.get("open-timeout", positive_float, 20.0)


def demo_config(src: Sources) -> DemoConfig:
    """The demo's configuration."""
    data_dir = src.get("data", path, default_data_dir())
    return DemoConfig(
        data_dir=data_dir,
        log_url=src.get("log", log_url, (data_dir / "log").resolve().as_uri()),
        workers=src.get("workers", positive_int, 2),
        duration_s=src.get("duration", positive_float, 10.0),
        seed=src.get("seed", non_negative_int, 0),
        cache=_cache(src),
        refresh_s=src.get("refresh", positive_float, 0.5),
        open_timeout_s=_open_timeout(src),
    )


def serve_config(src: Sources) -> ServeConfig:
    """``serve``'s configuration; the log URL is required."""
    return ServeConfig(
        log_url=_required(src, "log", log_url),
        source=src.get("source", text_value, "worker-0"),
        seed=src.get("seed", non_negative_int, 0),
        cache=_cache(src),
        duration_s=src.optional("duration", positive_float),
        max_requests=src.optional("requests", positive_int),
        rate_rps=src.optional("rate", positive_float),
        metrics_host=src.get("metrics-host", text_value, "0.0.0.0"),
        metrics_port=src.optional("metrics-port", port),
        status_file=src.optional("status-file", path),
        status_every_s=src.get("status-every", positive_float, 1.0),
        open_timeout_s=_open_timeout(src),
    )


def follow_config(src: Sources) -> FollowConfig:
    """``follow``'s configuration; the log URL is required."""
    return FollowConfig(
        log_url=_required(src, "log", log_url),
        snapshot_dir=src.optional("snapshots", path),
        snapshot_every_batches=src.get("snapshot-every-batches", positive_int, 1000),
        snapshot_every_s=src.get("snapshot-every", positive_float, 30.0),
        keep_snapshots=src.get("keep-snapshots", positive_int, 3),
        metrics_host=src.get("metrics-host", text_value, "0.0.0.0"),
        metrics_port=src.optional("metrics-port", port),
        status_file=src.optional("status-file", path),
        status_every_s=src.get("status-every", positive_float, 1.0),
        duration_s=src.optional("duration", positive_float),
        open_timeout_s=_open_timeout(src),
    )


def inspect_config(src: Sources) -> InspectConfig:
    """``inspect``'s configuration."""
    return InspectConfig(
        log_url=_required(src, "log", log_url),
        start=src.optional("from", position),
        source=src.optional("source", text_value),
        limit=src.optional("limit", positive_int),
        brief=bool(src.flags.get("brief")),
        open_timeout_s=_open_timeout(src),
    )


def route_config(src: Sources) -> RouteConfig:
    """``route``'s configuration."""
    return RouteConfig(
        log_url=_required(src, "log", log_url),
        tokens=_required(src, "tokens", token_list),
        extra_key=src.optional("extra-key", text_value),
        snapshot_dir=src.optional("snapshots", path),
        open_timeout_s=_open_timeout(src),
    )


def snapshot_config(src: Sources) -> SnapshotConfig:
    """``snapshot`` / ``restore``'s configuration."""
    return SnapshotConfig(
        log_url=_required(src, "log", log_url),
        snapshot_dir=_required(src, "snapshots", path),
        open_timeout_s=_open_timeout(src),
    )


def _required(src: Sources, setting: str, parse: Callable[[str, str], T]) -> T:
    value = src.optional(setting, parse)
    if value is None:
        raise SettingError(src.where(setting), f"is required (or set {env_name(setting)})")
    return value
