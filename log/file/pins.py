"""Named pins of a log directory: ``<dir>/pins/<quoted name>.json`` holding a position.

Any process may pin (a writer or a read-only follower); retention reads every pin file and
never deletes a record at or after the smallest pinned offset. Files are replaced atomically
(tmp, fsync, rename, fsync of the folder).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import quote

from log.directories import create_data_directory
from log.errors import ConfigError
from log.file.segment import fsync_directory
from log.position import Position

logger = logging.getLogger(__name__)

PINS_DIR = "pins"
_MAX_NAME_CHARS = 200
_SUFFIX = ".json"


class PinStore:
    """Reads and writes the pin files of one log directory (blocking)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / PINS_DIR

    def set(self, name: str, position: Position | None) -> None:
        """Pin ``position`` under ``name``, or remove the pin when ``position`` is None."""
        if type(name) is not str or not 0 < len(name) <= _MAX_NAME_CHARS:
            raise ConfigError("pin name", f"must be a str of 1 to {_MAX_NAME_CHARS} characters")
        # Percent-encoding (dots too) turns any name into one plain file name.
        path = self.directory / f"{quote(name, safe='-_')}{_SUFFIX}"
        if position is None:
            path.unlink(missing_ok=True)
            return
        create_data_directory(self.directory)
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
