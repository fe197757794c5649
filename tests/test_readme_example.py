"""The README's library example runs as written (with its paths moved into a temporary dir)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs(tmp_path: Path) -> None:
    """The 'Using it' snippet publishes, follows, snapshots and ends with equal digests."""
    match = re.search(r"## Using it\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "README lost its 'Using it' example"
    code = match.group(1).replace("/tmp/swa-log", str(tmp_path / "log"))
    code = code.replace("/tmp/swa-snap", str(tmp_path / "snap"))
    # exec: the snippet is our own README, run on purpose.
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
