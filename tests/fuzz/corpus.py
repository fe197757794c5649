"""The fuzz corpus in ``tests/data/fuzz/<kind>/``: hand-picked inputs and past finds, replayed
by every run. ``python -m tests.fuzz.make_corpus`` rewrites the generated part."""

from __future__ import annotations

from pathlib import Path

CORPUS_ROOT = Path(__file__).resolve().parents[1] / "data" / "fuzz"


def corpus_files(kind: str) -> list[Path]:
    """The corpus files of ``kind``, sorted; a missing or empty corpus is an error."""
    files = sorted(p for p in (CORPUS_ROOT / kind).iterdir() if p.is_file() and p.name != "README")
    if not files:
        raise FileNotFoundError(f"the fuzz corpus {CORPUS_ROOT / kind} is empty")
    return files
