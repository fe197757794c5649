"""Rewrite the README's configuration table from ``swa_es.cli.settings.SETTINGS``.

Usage: ``.venv/bin/python tools/settings_table.py`` (``--check``: exit 1 if it is stale).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from swa_es.cli.settings import readme_table

README = Path(__file__).resolve().parents[1] / "README.md"
TABLE = re.compile(
    r"(<!-- settings-table:start -->\n).*?(<!-- settings-table:end -->)", flags=re.DOTALL
)


def main() -> int:
    """Rewrite (or with ``--check`` compare) the table; the exit status."""
    text = README.read_text()
    if TABLE.search(text) is None:
        sys.stderr.write(f"{README}: no <!-- settings-table:start/end --> markers\n")
        return 1
    updated = TABLE.sub(lambda m: m.group(1) + readme_table() + m.group(2), text)
    if "--check" in sys.argv[1:]:
        return 0 if updated == text else 1
    README.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
