"""Creating data directories (logs, pins, snapshots) that no other user can write to."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

DATA_DIRECTORY_MODE: Final = 0o750
"""Owner: all; group: read and enter; others: nothing (the umask can only take more away)."""


def create_data_directory(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and its missing parents with ``DATA_DIRECTORY_MODE``; return it.

    Directories that already exist keep their mode; one writable by every user gets a warning
    (anyone could then plant or delete log segments and snapshots).
    """
    directory = Path(path)
    missing: list[Path] = []
    candidate = directory
    while not candidate.exists() and candidate != candidate.parent:
        missing.append(candidate)
        candidate = candidate.parent
    for component in reversed(missing):
        component.mkdir(mode=DATA_DIRECTORY_MODE, exist_ok=True)
    if not missing and directory.stat().st_mode & stat.S_IWOTH:
        logger.warning("data directory %s is writable by every user", directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} exists and is not a directory")
    return directory
