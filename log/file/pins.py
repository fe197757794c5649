"""Named pins of a log directory: ``<dir>/pins/<name>.json`` holding a position.

Any process may pin (a writer or a read-only follower); retention reads every pin file and
never deletes a record at or after the smallest pinned offset. Files are replaced atomically
(tmp, fsync, rename, fsync of the folder).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from log.errors import ConfigError
from log.file.segment import fsync_directory
from log.position import Position

logger = logging.getLogger(__name__)

PINS_DIR = "pins"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SUFFIX = ".json"


class PinStore:
    """Reads and writes the pin files of one log directory (blocking)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / PINS_DIR

    def set(self, name: str, position: Position | None) -> None:
        """Pin ``position`` under ``name``, or remove the pin when ``position`` is None."""
        if not _NAME.fullmatch(name) or name.startswith("."):
            raise ConfigError("pin name", f"{name!r} must match [A-Za-z0-9_.-]{{1,128}}")
        path = self.directory / f"{name}{_SUFFIX}"
        if position is None:
            path.unlink(missing_ok=True)
            return
        self.directory.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as out:
            out.write(position.to_json())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        fsync_directory(self.directory)

    def min_offset(self, partition: int = 0) -> int | None:
        """The smallest offset pinned for ``partition``; 0 (keep all) if a pin is unreadable."""
        if not self.directory.is_dir():
            return None
        offsets = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            try:
                offsets.append(Position.from_json(path.read_bytes()).get(partition))
            except (OSError, ValueError) as exc:
                logger.warning("pin %s is unreadable (%s); retention keeps everything", path, exc)
                return 0
        return min(offsets) if offsets else None
