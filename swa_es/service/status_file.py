"""Status files: a small JSON document replaced atomically, for scripts and tests to read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson


def _write(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(
        orjson.dumps(
            document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
        )
    )
    os.replace(tmp, path)


async def write_status(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` with ``document`` as JSON (write to a temp file, then rename)."""
    await anyio.to_thread.run_sync(_write, path, document)


async def write_status_every(
    path: Path, status: Callable[[], dict[str, Any]], period_s: float
) -> None:
    """Rewrite ``path`` with ``status()`` every ``period_s`` until cancelled."""
    while True:
        await write_status(path, status())
        await anyio.sleep(period_s)


def read_status(path: Path) -> dict[str, Any] | None:
    """The document at ``path``, or ``None`` when there is none (yet)."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: status file is not a JSON object")
    return data
