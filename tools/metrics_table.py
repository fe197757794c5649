"""Rewrite the metric list of ``docs/operations.md`` from the metric table
(``swa_es.service.metric_table``).

Usage: ``.venv/bin/python tools/metrics_table.py`` (``--check``: exit 1 if it is stale).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from swa_es.service.metric_table import markdown_table

OPERATIONS_MD = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
TABLE = re.compile(
    r"(<!-- metrics-table:start -->\n).*?(<!-- metrics-table:end -->)", flags=re.DOTALL
)


def updated(text: str) -> str | None:
    """``text`` with its metric list rewritten (None: it has no markers)."""
    if TABLE.search(text) is None:
        return None
    return TABLE.sub(lambda m: m.group(1) + markdown_table() + m.group(2), text)


def main() -> int:
    """Rewrite (or with ``--check`` compare) the list; the exit status."""
    text = OPERATIONS_MD.read_text()
    new = updated(text)
    if new is None:
        sys.stderr.write(f"{OPERATIONS_MD}: no <!-- metrics-table:start/end --> markers\n")
        return 1
    if "--check" in sys.argv[1:]:
        return 0 if new == text else 1
    OPERATIONS_MD.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
