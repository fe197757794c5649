"""``swa-es restore``: load the newest valid snapshot, replay the tail, report what it rebuilt.

It prints one JSON object: the snapshot used, the log positions that were gone and every
source's digest (the same line as ``swa-es snapshot``, which shares its code).
"""

from __future__ import annotations

from typing import Any

from swa_es.cli import snapshot

COMMAND = snapshot.COMMANDS["restore"]


def add_parser(subparsers: Any) -> None:
    """Add ``restore`` to the ``swa-es`` parser."""
    snapshot.add_parser(subparsers, "restore")


def run(config: snapshot.SnapshotConfig) -> int:
    """Run ``restore``, printing to stdout; the exit status."""
    return snapshot.run(config, "restore")
