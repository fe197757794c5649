"""Rewrite the table of ``docs/configuration.md`` from the options the commands declare.

Usage: ``.venv/bin/python tools/settings_table.py`` (``--check``: exit 1 if it is stale).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from swa_es.cli.main import commands
from swa_es.cli.settings import configuration_table

CONFIGURATION_MD = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
TABLE = re.compile(
    r"(<!-- settings-table:start -->\n).*?(<!-- settings-table:end -->)", flags=re.DOTALL
)


def main() -> int:
    """Rewrite (or with ``--check`` compare) the table; the exit status."""
    text = CONFIGURATION_MD.read_text()
    if TABLE.search(text) is None:
        sys.stderr.write(f"{CONFIGURATION_MD}: no <!-- settings-table:start/end --> markers\n")
        return 1
    updated = TABLE.sub(lambda m: m.group(1) + configuration_table(commands()) + m.group(2), text)
    if "--check" in sys.argv[1:]:
        return 0 if updated == text else 1
    CONFIGURATION_MD.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
