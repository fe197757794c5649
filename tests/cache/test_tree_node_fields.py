"""``TreeNode``'s structural fields stay inside ``cache.tree``, and only ``state.py`` changes
them (the invariant written in ``cache/tree/node.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELDS = frozenset({"_token_ids", "_value", "_parent", "_children", "_tombstone"})
WRITERS = {"cache/tree/state.py", "cache/tree/node.py"}


def _touches(path: Path) -> list[tuple[int, str, bool]]:
    """(line, field, is_write) for each ``x._field`` of ``path`` where ``x`` is not ``self``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        for target in targets:
            inner = target.value if isinstance(target, ast.Subscript) else target
            if _field_of_other(inner):
                found.append((node.lineno, inner.attr, True))
        if _field_of_other(node):
            assert isinstance(node, ast.Attribute)
            found.append((node.lineno, node.attr, False))
    return found


def _field_of_other(node: ast.expr | ast.AST) -> bool:
    """``x._field`` with ``x`` not ``self`` (a class's own ``self._children`` is its own)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in FIELDS
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    )


def _sources() -> list[Path]:
    # consumers and log cannot reach a TreeNode (the import contracts keep the tree out).
    # Hidden folders are left out: bench/.venv-sglang (bench/setup_sglang.sh) is not ours.
    packages = ("cache", "swa_es", "bench", "tests")
    return [
        p
        for package in packages
        for p in sorted((ROOT / package).rglob("*.py"))
        if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    ]


def test_only_the_tree_package_reads_node_fields() -> None:
    """No module outside cache/tree reads or writes a TreeNode's underscored fields."""
    outside = [
        f"{path.relative_to(ROOT)}:{line} {field}"
        for path in _sources()
        if not path.relative_to(ROOT).as_posix().startswith("cache/tree/")
        for line, field, _ in _touches(path)
    ]
    assert outside == []


def test_only_state_changes_node_fields() -> None:
    """Inside cache/tree, only state.py (and the node's own constructor) assigns them."""
    writes = [
        f"{path.relative_to(ROOT)}:{line} {field}"
        for path in _sources()
        if path.relative_to(ROOT).as_posix() not in WRITERS
        for line, field, is_write in _touches(path)
        if is_write
    ]
    assert writes == []
    assert any(is_write for _, _, is_write in _touches(ROOT / "cache/tree/state.py")), "scanner"
