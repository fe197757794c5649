"""What makes a directory a log, and checking one before a reader opens it.

A log directory holds segment files (``<base>.log``), their indexes (``<base>.idx``), the
writer's ``LOCK``, the log's ``identity.json`` or its ``pins/``: any of them makes it a log. An
empty directory is a log no writer has written yet (a follower may wait for one). A directory
holding only other things (``/etc``, a snapshot store) is not a log, and a reader refuses it,
as it refuses a path that does not exist unless asked to create it. Blocking.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

from log.directories import create_data_directory
from log.errors import NotALogError
from log.file.identity import IDENTITY_FILE
from log.file.lock import LOCK_NAME
from log.file.pins import PINS_DIR
from log.file.segment import INDEX_SUFFIX, SEGMENT_SUFFIX

_MARKERS = frozenset((LOCK_NAME, IDENTITY_FILE, PINS_DIR))
_NAME_DIGITS = 20
_SHOWN_ENTRIES = 3


class DirectoryKind(Enum):
    """What a path given as a log holds."""

    MISSING = "missing"
    NOT_A_DIRECTORY = "not a directory"
    EMPTY = "empty"
    LOG = "log"
    OTHER = "other"


def _is_log_entry(name: str) -> bool:
    if name in _MARKERS:
        return True
    stem, suffix = name[:-4], name[-4:]
    return suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX) and len(stem) == _NAME_DIGITS and stem.isdigit()


def classify(directory: Path) -> tuple[DirectoryKind, list[str]]:
    """What ``directory`` holds, and (for ``OTHER``) a few of its entries, sorted."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return DirectoryKind.MISSING, []
    except NotADirectoryError:
        return DirectoryKind.NOT_A_DIRECTORY, []
    if not names:
        return DirectoryKind.EMPTY, []
    if any(_is_log_entry(name) for name in names):
        return DirectoryKind.LOG, []
    return DirectoryKind.OTHER, names[:_SHOWN_ENTRIES]


def check_for_reading(directory: Path, *, create: bool) -> DirectoryKind:
    """Make sure a reader may open ``directory`` as a log (creating it first when missing and
    ``create``); ``NotALogError`` naming it otherwise. Returns what it held."""
    kind, shown = classify(directory)
    if kind is DirectoryKind.MISSING:
        if not create:
            raise NotALogError(
                str(directory),
                "no log directory there (check the path; to wait for a writer to create the "
                "log, open it with create=true: `swa-es follow --create-log`)",
            )
        create_data_directory(directory)
        return DirectoryKind.EMPTY
    if kind is DirectoryKind.NOT_A_DIRECTORY:
        raise NotALogError(str(directory), "not a directory, so not a log")
    if kind is DirectoryKind.OTHER:
        raise NotALogError(
            str(directory),
            "not a log directory: it holds no segment files (*.log), no "
            f"{IDENTITY_FILE} and no {LOCK_NAME}, but other entries (e.g. "
            f"{', '.join(repr(name) for name in shown)})",
        )
    return kind


def refuse_missing(directory: Path) -> None:
    """``NotALogError`` when ``directory`` does not exist (a writer told not to create it)."""
    if classify(directory)[0] is DirectoryKind.MISSING:
        raise NotALogError(str(directory), "no log directory there (and create=false)")
