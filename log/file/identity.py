"""The identity file of a log directory: ``<dir>/identity.json`` (``log.identity``).

A writer writes it when it first opens the directory (a new log, or one created before logs had
identities), under the writer lock, and it never changes afterwards: deleting the directory and
writing the log again makes a new log with a new id. It appears whole or not at all (written to
a temporary file of its own name, fsynced, linked into place, the directory fsynced). Readers
only read it (None while no writer has written one). Blocking; runs in a worker thread.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Final

import orjson

from log.file.segment import fsync_directory
from log.identity import LogIdentity, LogIdentityError, new_log_identity

logger = logging.getLogger(__name__)

IDENTITY_FILE: Final = "identity.json"
_MAX_BYTES: Final = 4096


def identity_path(directory: Path) -> Path:
    """The identity file of the log in ``directory``."""
    return directory / IDENTITY_FILE


def read_identity(directory: Path) -> LogIdentity | None:
    """The identity recorded in ``directory`` (None: none yet); ``LogIdentityError`` naming the
    file when it is there but unreadable (damage is never taken for a new log)."""
    path = identity_path(directory)
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LogIdentityError(str(path), f"cannot read it: {exc}") from exc
    if len(data) > _MAX_BYTES:
        raise LogIdentityError(str(path), f"larger than {_MAX_BYTES} bytes: not an identity file")
    try:
        return LogIdentity.from_obj(orjson.loads(data))
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise LogIdentityError(
            str(path),
            f"damaged ({exc}); restore it from a backup, or delete it to give this log a new "
            "identity (snapshots taken of it will then be refused)",
        ) from None


def ensure_identity(directory: Path) -> LogIdentity:
    """The identity of ``directory``, written first when there is none. Call it holding the
    writer lock (two writers never race to write it; a file already there is kept)."""
    found = read_identity(directory)
    if found is not None:
        return found
    identity = new_log_identity()
    path = identity_path(directory)
    tmp = directory / f".{IDENTITY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with tmp.open("xb") as handle:
            handle.write(orjson.dumps(identity.to_obj()))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            # link, not rename: it never replaces an identity already there
            os.link(tmp, path)
        except FileExistsError:
            return ensure_identity(directory)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(directory)
    logger.info("log %s: recorded its identity %s", directory, identity.log_id)
    return identity
