"""The native core's modules form no circle: within each Rust module directory, the sibling
modules that one file's non-test code names (``super::x``, ``crate::dir::x``) never lead back
to it. Shared parts live in a module of their own instead."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "native" / "src"


def _code(path: Path) -> str:
    """The file's text before its test module, without comments."""
    text = path.read_text().split("#[cfg(test)]", 1)[0]
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def _graph(directory: Path) -> dict[str, set[str]]:
    modules = {path.stem for path in directory.glob("*.rs")} - {"mod"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        code = _code(directory / f"{name}.rs")
        named = set(re.findall(r"\bsuper::(\w+)", code))
        named |= set(re.findall(rf"\bcrate::{directory.name}::(\w+)", code))
        named |= {
            item.strip().split("::")[0]
            for group in re.findall(r"\bsuper::\{([^}]*)\}", code)
            for item in group.split(",")
        }
        graph[name] = (named & modules) - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_module_directory_of_the_core_has_a_circle() -> None:
    """codec/, replica/, recorder/ and py/: each a graph without a circle."""
    directories = sorted(path.parent for path in SRC.rglob("mod.rs"))
    assert {path.name for path in directories} >= {"codec", "replica", "recorder", "py"}
    circles = {d.name: c for d in directories if (c := _cycle(_graph(d)))}
    assert not circles, f"module circles: {circles}"


def test_the_circle_finder_finds_one() -> None:
    """The finder itself: a two-module circle is found, a chain is not."""
    assert _cycle({"a": {"b"}, "b": {"a"}}) in (["a", "b", "a"], ["b", "a", "b"])
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
