"""The README and docs/ stay true to the tree: every ``swa-es COMMAND --flag`` they show exists in
the command line's parser, every path under "Where things live" exists, and every relative link
points at a file of the repository."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from swa_es.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

COMMAND = re.compile(r"swa-es\s+([a-z][a-z|]*)((?:[ \t]+[^\s`]+)*)")
"""``swa-es``, a command (``follow|snapshot`` names several) and the rest of the line."""

SEPARATORS = frozenset({"|", "||", "&", "&&", ";", ">", "2>&1"})

FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", flags=re.M | re.S)
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")

WRITTEN_ELSEWHERE: frozenset[str] = frozenset()
"""Documents that other branches add; a link to one is not checked until it exists here."""


def command_texts(text: str) -> Iterator[str]:
    """Every code block line (continuations joined) and every inline code span of ``text``."""
    for block in FENCE.findall(text):
        yield from block.replace("\\\n", " ").splitlines()
    outside = FENCE.sub("", text)
    yield from (span.replace("\n", " ") for span in INLINE.findall(outside))


def subcommand_flags() -> dict[str, set[str]]:
    """Each ``swa-es`` command and the option strings it accepts."""
    parser = build_parser()
    found: dict[str, set[str]] = {}
    for action in parser._actions:  # argparse has no public way to list subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {s for a in sub._actions for s in a.option_strings}
    return found


def shown_commands() -> Iterator[tuple[str, str, list[str]]]:
    """(document, command, its ``--flags``) for every ``swa-es`` command the docs show."""
    for doc in DOCS:
        for text in command_texts(doc.read_text()):
            for match in COMMAND.finditer(text):
                flags = []
                for token in match.group(2).split():
                    if token in SEPARATORS or token.startswith("#"):
                        break
                    if token.strip("[(").startswith("--"):
                        flags.append(token.strip("[](),.").split("=", 1)[0])
                for command in match.group(1).split("|"):
                    yield doc.name, command, flags


def test_docs_show_commands_at_all() -> None:
    """The scan finds the tour's commands (so the test below checks something)."""
    shown = {(command, tuple(flags)) for _, command, flags in shown_commands()}
    tour = {"--log", "--snapshots", "--http-port", "--metrics-port"}
    assert any(command == "follow" and tour <= set(flags) for command, flags in shown)
    assert any(command == "bridge" and "--zmq" in flags for command, flags in shown)


@pytest.mark.parametrize("doc", [d.name for d in DOCS])
def test_every_command_and_flag_shown_exists(doc: str) -> None:
    """Each ``swa-es COMMAND --flag`` of the document is a command and an option it takes."""
    flags_of = subcommand_flags()
    for name, command, flags in shown_commands():
        if name != doc:
            continue
        assert command in flags_of, f"{doc}: `swa-es {command}` is not a command"
        for flag in flags:
            assert flag in flags_of[command], f"{doc}: `swa-es {command}` has no {flag}"


def where_things_live() -> list[str]:
    """The paths the README's "Where things live" block lists, one per line."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Where things live", 1)[1]
    block = FENCE.search(section)
    assert block is not None, "README's 'Where things live' lost its block"
    return [line.split()[0] for line in block.group(1).splitlines() if line.strip()]


def test_where_things_live_is_true_to_the_tree() -> None:
    """Every path the README says something lives in exists."""
    paths = where_things_live()
    assert len(paths) >= 15
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"README's 'Where things live' names missing paths: {missing}"


def test_relative_links_resolve() -> None:
    """Every relative link of the README and docs/ names a file of the repository."""
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            if path.relative_to(REPO).as_posix() in WRITTEN_ELSEWHERE and not path.exists():
                continue
            if not path.exists():
                broken.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not broken, broken
