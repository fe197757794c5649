"""The native core keeps to CPython's stable ABI: its Python edge names no private object layout,
its compiled module needs no private symbol, and it loads and works on every Python 3.11+ here.

The first two tests read the sources and the built file; the last runs ``abi3_smoke.py`` on each
CPython 3.11 or newer this machine has (the venv's, the system's, pyenv's), so a version that
changed int or list internals cannot break the core silently.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cache.events._native as native

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "native" / "src").rglob("*.rs"))
# The only sources that reach the interpreter: the crate confines pyo3 to its Python edge, so
# the core's own buffers (a snapshot's arrays, say) may be handled as bytes elsewhere.
PYTHON_EDGE = ROOT / "native" / "src" / "py"
INTERPRETER_NAMES = re.compile(r"\bpyo3\b|\bffi::")

# What only CPython's private object layout or its non-limited API names: object and type
# fields, the item arrays of lists and tuples, int digits, the unchecked item macros, a type's
# allocator and instance size (the tools of writing an instance's memory directly), and the
# underscore-prefixed private API.
PRIVATE_LAYOUT = {
    r"\bob_item\b": "a list's item array",
    r"\bob_digit\b": "an int's digits",
    r"\blong_value\b": "an int's value struct (3.12+)",
    r"\blv_tag\b": "an int's size and sign tag (3.12+)",
    r"\bob_size\b": "a variable-size object's length field",
    r"\bob_refcnt\b": "the reference count field",
    r"\bob_type\b": "the type field (read it through Py_TYPE)",
    r"\btp_alloc\b|\bPy_tp_alloc\b": "a type's allocator slot",
    r"\btp_basicsize\b|__basicsize__|__itemsize__": "an instance's memory size",
    r"\bPyType_GetSlot\b": "a type's raw slots",
    r"\bPy(Tuple|List)_(SET|GET)_ITEM\b": "the unchecked item macros",
    r"\bPySequence_Fast_ITEMS\b": "a sequence's item array",
    r"\bPy(Bytes|ByteArray|Unicode)_(AS_STRING|AsString|DATA|AS_DATA)\b": "a buffer to write into",
    r"size_of::<ffi::Py\w+>": "the size of an interpreter struct",
    r"\.cast::<u8>\(\)|\.cast::<\*mut ffi::PyObject>\(\)": "an object's memory read by offset",
    r"\bfrom_raw_parts(_mut)?\b": "an interpreter array read in place",
    r"\bffi::_Py\w*": "the private API",
}


def _code_lines(source: Path) -> list[tuple[int, str, str]]:
    """Each line of ``source`` with its number and its code (comments may explain what is
    avoided)."""
    lines = source.read_text().splitlines()
    return [(number, line, line.split("//", 1)[0]) for number, line in enumerate(lines, start=1)]


def test_only_the_python_edge_reaches_the_interpreter() -> None:
    """pyo3 and its ffi are named only under ``native/src/py``, which is what lets the layout
    check below read that directory alone."""
    outside = [
        f"{source.relative_to(ROOT)}:{number}: {line.strip()}"
        for source in SOURCES
        if PYTHON_EDGE not in source.parents
        for number, line, code in _code_lines(source)
        if INTERPRETER_NAMES.search(code)
    ]
    assert not outside, "the interpreter reached outside native/src/py:\n" + "\n".join(outside)


def test_the_sources_name_no_private_cpython_layout() -> None:
    """No source of the Python edge names a private layout field, macro or API (a fail names
    the file, line and what it is)."""
    edge = [source for source in SOURCES if PYTHON_EDGE in source.parents]
    assert edge, "native/src/py has no Rust sources"
    found = []
    for source in edge:
        for number, line, code in _code_lines(source):
            for pattern, what in PRIVATE_LAYOUT.items():
                if re.search(pattern, code):
                    found.append(f"{source.relative_to(ROOT)}:{number}: {what}: {line.strip()}")
    assert not found, "private CPython layout referenced:\n" + "\n".join(found)


def test_the_crate_builds_for_the_stable_abi() -> None:
    """pyo3 is built with the abi3 feature for 3.11+, and the module is named as abi3."""
    manifest = (ROOT / "native" / "Cargo.toml").read_text()
    assert re.search(r'pyo3 = \{[^}]*"abi3-py311"', manifest)
    assert Path(native.__file__).name.endswith(".abi3.so")


# Symbols of the stable ABI that carry an underscore (reference counting and the singletons).
STABLE_UNDERSCORED = {
    "_Py_Dealloc",
    "_Py_DecRef",
    "_Py_IncRef",
    "_Py_NoneStruct",
    "_Py_TrueStruct",
    "_Py_FalseStruct",
    "_Py_NotImplementedStruct",
    "_Py_EllipsisObject",
}


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_the_compiled_module_needs_no_private_symbol() -> None:
    """Every CPython symbol the module imports is public (no ``_Py`` name outside the stable
    ABI's reference counting and singletons)."""
    listing = subprocess.run(
        ["nm", "-D", "--undefined-only", native.__file__],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    symbols = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}
    python = {symbol for symbol in symbols if symbol.startswith(("Py", "_Py"))}
    assert python, "the module imports no CPython symbol: nm read the wrong file?"
    private = sorted(s for s in python if s.startswith("_") and s not in STABLE_UNDERSCORED)
    assert not private, f"private CPython symbols: {private}"


def _interpreters() -> list[str]:
    """Every CPython 3.11+ found here: this one, the system's and pyenv's (one per version)."""
    found = {sys.executable}
    for pattern in ("/usr/bin/python3.1[1-9]", "/root/.pyenv/versions/3.1[1-9]*/bin/python3"):
        found.update(glob.glob(pattern))
    return sorted(found)


@pytest.mark.parametrize("python", _interpreters())
def test_the_module_loads_and_works_on_every_python_found(python: str) -> None:
    """The one abi3 build loads on each interpreter and hashes, reads token ids, encodes,
    decodes, records and replicates there (``abi3_smoke.py``, standard library only)."""
    run = subprocess.run(
        [python, str(Path(__file__).with_name("abi3_smoke.py")), native.__file__],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok ")


_UNBOUND = """
import sys
from dataclasses import dataclass
sys.path.insert(0, sys.argv[1])
import abi3_smoke
native = abi3_smoke.load(sys.argv[2])
try:
    native.decode_event(b'{"type":"AllBlocksCleared"}', "e")
except RuntimeError as error:
    print("unbound:", error)

@dataclass(frozen=True)
class BlockStored:  # the right name, fields in another order
    token_ids: tuple
    block_hashes: tuple
names = ["BlockRemoved", "BlockSWAEvicted", "BlockSWARestored", "AllBlocksCleared", "EventBatch",
         "BatchMeta", "DecodeError", "EventRecorderError", "ReplicaConsistencyError",
         "ReplicaSnapshotError"]
classes = {name: getattr(abi3_smoke, name) for name in names}
try:
    native.bind_classes({**classes, "BlockStored": BlockStored})
except TypeError as error:
    print("refused:", error)

@dataclass(frozen=True)
class BlockPinned:  # an event type the core has no row for
    block_hashes: tuple
try:
    extra = {"BlockStored": abi3_smoke.BlockStored, "BlockPinned": BlockPinned}
    native.bind_classes({**classes, **extra})
except TypeError as error:
    print("undeclared:", error)
"""


def test_the_core_refuses_to_work_unbound_or_with_other_fields() -> None:
    """Before ``cache.events`` binds its classes the core says so; a class whose fields are not
    the ones it writes is refused by name (never filled by position), and so is an event class
    the core does not declare (it would be written and read as nothing)."""
    run = subprocess.run(
        [sys.executable, "-c", _UNBOUND, str(Path(__file__).parent), native.__file__],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = run.stdout.splitlines()
    assert lines[0].startswith("unbound:") and "not bound" in lines[0]
    assert lines[1].startswith('refused: BlockStored: fields ["token_ids", "block_hashes"]')
    assert lines[2] == (
        "undeclared: bind_classes: BlockPinned is not a class the native core declares "
        "(an event type needs its row in native/src/event_types.rs)"
    )
