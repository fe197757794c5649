"""Named pins of a log directory: ``<dir>/pins/<quoted name>.json``, a position and its owner.

Any process may pin (a writer or a read-only follower); retention reads every pin file and
never deletes a record at or after the smallest pinned offset. A pin file is JSON::

    {"position": {"0": 1234}, "owner": {"name": ..., "command": ..., "pid": ..., "host": ...,
     "written_at": ..., ...}}

``owner`` says whose the pin is: the pin's name, the command line's program and subcommand,
the process and host, when it was written (Unix seconds), plus what the pinning caller adds
(a follower adds its role and snapshot store). A file holding just a position (what earlier
versions wrote) still reads as a pin. Files are replaced atomically: each writer writes its
own temporary file in the pins folder (a unique name, so processes pinning the same name at
once never collide), fsyncs it, renames it over the pin and fsyncs the folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from log.directories import create_data_directory
from log.errors import ConfigError
from log.file.segment import fsync_directory
from log.position import Position

logger = logging.getLogger(__name__)

PINS_DIR = "pins"
_MAX_NAME_CHARS = 200
_SUFFIX = ".json"
_TMP_SUFFIX = ".tmp"
_PIN_FILE_MODE = 0o640
"""Readable by the log's group, like its directories (``log.directories``)."""


@dataclass(frozen=True, slots=True)
class Pin:
    """One pin as read from its file: the position kept and who wrote it (empty for a pin
    file of an earlier version, which held only the position)."""

    path: Path
    position: Position
    owner: Mapping[str, Any] = field(default_factory=dict)


def command_of(argv: list[str]) -> str:
    """The program and subcommand of a command line (``swa-es follow``), leaving its options
    (which may hold URLs with credentials) out."""
    if not argv:
        return ""
    program = Path(argv[0]).name
    if program in ("__main__.py", "-m", "-c"):
        program = Path(argv[0]).parent.name or program
    words = [program]
    for arg in argv[1:]:
        if arg.startswith("-"):
            continue
        words.append(arg)
        break
    return " ".join(words)


def owner_record(name: str, extra: Mapping[str, str] | None) -> dict[str, Any]:
    """What a pin file says of its owner: ``extra`` (the caller's), then name, command, pid,
    host and time."""
    return {
        **(extra or {}),
        "name": name,
        "command": command_of(sys.argv),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "written_at": time.time(),
    }


def parse_pin(path: Path, data: bytes) -> Pin:
    """The pin in ``data`` (a pin file's bytes); ``ValueError`` when it is not one."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"pin is not JSON: {exc}") from None
    if type(raw) is dict and "position" in raw:
        owner = raw.get("owner") or {}
        if type(owner) is not dict:
            raise ValueError(f"pin owner must be a JSON object, got {type(owner).__name__}")
        return Pin(path, Position.from_json(orjson.dumps(raw["position"])), owner)
    return Pin(path, Position.from_json(data))


class PinStore:
    """Reads and writes the pin files of one log directory (blocking)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / PINS_DIR

    def path_of(self, name: str) -> Path:
        """The file of the pin ``name``; a ``ConfigError`` for a name that cannot be one."""
        if type(name) is not str or not 0 < len(name) <= _MAX_NAME_CHARS:
            raise ConfigError("pin name", f"must be a str of 1 to {_MAX_NAME_CHARS} characters")
        # Percent-encoding (dots too) turns any name into one plain file name.
        return self.directory / f"{quote(name, safe='-_')}{_SUFFIX}"

    def set(
        self, name: str, position: Position | None, owner: Mapping[str, str] | None = None
    ) -> None:
        """Pin ``position`` under ``name`` (``owner``: what to add to the owner record), or
        remove the pin when ``position`` is None."""
        path = self.path_of(name)
        if position is None:
            path.unlink(missing_ok=True)
            return
        create_data_directory(self.directory)
        body = {"position": orjson.loads(position.to_json()), "owner": owner_record(name, owner)}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=_TMP_SUFFIX, dir=self.directory)
        try:
            os.fchmod(fd, _PIN_FILE_MODE)
            with open(fd, "wb") as out:
                out.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_directory(self.directory)

    def get(self, name: str) -> Pin | None:
        """The pin ``name`` (None: not pinned); ``ValueError`` when its file is unreadable."""
        path = self.path_of(name)
        try:
            return parse_pin(path, path.read_bytes())
        except FileNotFoundError:
            return None

    def pins(self) -> list[Pin]:
        """Every pin, by file name; ``ValueError`` naming the first unreadable one."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # unpinned while we looked
            except OSError as exc:
                raise ValueError(f"pin {path} is unreadable: {exc}") from None
            try:
                found.append(parse_pin(path, data))
            except ValueError as exc:
                raise ValueError(f"pin {path} is unreadable: {exc}") from None
        return found

    def min_offset(self, partition: int = 0) -> int | None:
        """The smallest offset pinned for ``partition``; 0 (keep all) if a pin is unreadable."""
        try:
            offsets = [pin.position.get(partition) for pin in self.pins()]
        except (OSError, ValueError) as exc:
            logger.warning("%s; retention keeps everything", exc)
            return 0
        return min(offsets) if offsets else None
