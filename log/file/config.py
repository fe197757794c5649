"""Options of the file log, parsed from URL query strings or typed keyword arguments."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar, cast

from log.errors import ConfigError

FsyncPolicy = Literal["always", "batch", "never"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("always", "batch", "never")
MiB = 1024 * 1024
_MAX_FRAME_BODY = 2**32 - 1
_T = TypeVar("_T")

DEFAULT_SEGMENT_BYTES = 64 * MiB
DEFAULT_BATCH_MAX_DELAY_S = 0.001
DEFAULT_BATCH_MAX_RECORDS = 1024
DEFAULT_MAX_RECORD_BYTES = 16 * MiB
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_POLL_INTERVAL_S = 0.05


@dataclass(frozen=True, slots=True)
class FileLogConfig:
    """Every option of ``FileLog`` with its default (see the README for what each means)."""

    fsync: FsyncPolicy = "batch"
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    batch_max_delay_s: float = DEFAULT_BATCH_MAX_DELAY_S
    batch_max_records: int = DEFAULT_BATCH_MAX_RECORDS
    retention_bytes: int | None = None
    retention_age_s: float | None = None
    readonly: bool = False
    create: bool | None = None
    """Create the directory when it is missing (None: a writer does, a readonly reader does not
    and refuses a missing directory instead)."""
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S

    @property
    def creates(self) -> bool:
        """Whether opening creates a missing directory."""
        return not self.readonly if self.create is None else self.create

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ConfigError(
                "fsync", f"expected one of {', '.join(FSYNC_POLICIES)}, got {self.fsync!r}"
            )
        _check_range("segment_bytes", self.segment_bytes, 64, 2**32 - 1)
        _check_range("batch_max_delay_s", self.batch_max_delay_s, 0.0, 10.0)
        _check_range("batch_max_records", self.batch_max_records, 1, 1_000_000)
        _check_range("max_record_bytes", self.max_record_bytes, 1, _MAX_FRAME_BODY - 64 * 1024)
        _check_range("index_interval_bytes", self.index_interval_bytes, 1, 2**31)
        _check_range("poll_interval_s", self.poll_interval_s, 0.001, 60.0)
        if self.retention_bytes is not None:
            _check_range("retention_bytes", self.retention_bytes, 0, 2**63)
        if self.retention_age_s is not None:
            _check_range("retention_age_s", self.retention_age_s, 0.0, 1e12)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FileLogConfig:
        """Parse options given as strings (URL query) or typed values; unknown names or bad
        values raise ``ConfigError`` naming the option."""
        known = {f.name for f in fields(cls)}
        parsed: dict[str, Any] = {}
        for name, raw in options.items():
            if name not in known:
                raise ConfigError(
                    name, f"unknown option for file:// (known: {', '.join(sorted(known))})"
                )
            parsed[name] = _PARSERS[name](name, raw)
        return cls(**parsed)


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(name, f"must be between {low} and {high}, got {value!r}")


def _parse_int(name: str, raw: Any) -> int:
    if type(raw) is int:
        return raw
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        return int(raw)
    raise ConfigError(name, f"expected an integer, got {raw!r}")


def _parse_float(name: str, raw: Any) -> float:
    if type(raw) in (int, float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            pass
    raise ConfigError(name, f"expected a number, got {raw!r}")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _parse_bool(name: str, raw: Any) -> bool:
    if type(raw) is bool:
        return raw
    if isinstance(raw, str) and raw.lower() in _TRUE + _FALSE:
        return raw.lower() in _TRUE
    raise ConfigError(name, f"expected true or false, got {raw!r}")


def _parse_fsync(name: str, raw: Any) -> FsyncPolicy:
    if raw in FSYNC_POLICIES:
        return cast(FsyncPolicy, raw)
    raise ConfigError(name, f"expected one of {', '.join(FSYNC_POLICIES)}, got {raw!r}")


def _optional(parse: Callable[[str, Any], _T]) -> Callable[[str, Any], _T | None]:
    def parse_optional(name: str, raw: Any) -> _T | None:
        if raw is None or (isinstance(raw, str) and raw.lower() in ("", "none")):
            return None
        return parse(name, raw)

    return parse_optional


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "fsync": _parse_fsync,
    "segment_bytes": _parse_int,
    "batch_max_delay_s": _parse_float,
    "batch_max_records": _parse_int,
    "retention_bytes": _optional(_parse_int),
    "retention_age_s": _optional(_parse_float),
    "readonly": _parse_bool,
    "create": _optional(_parse_bool),
    "max_record_bytes": _parse_int,
    "index_interval_bytes": _parse_int,
    "poll_interval_s": _parse_float,
}
