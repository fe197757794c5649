"""Every exception class the four packages define derives from the root, ``SwaEsError``
(docs/design.md §2), and the consistency error has one class under both its names."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
from pathlib import Path

import consumers
import swa_es
from cache.errors import SwaEsError
from cache.events.replica_store import ReplicaConsistencyError

PACKAGES = ("cache", "log", "consumers", "swa_es")

NEEDS_AN_ENGINE = ("swa_es.integrations.",)
"""Modules that import an engine (sglang) at import time: read as source where it is absent."""


def _module_names() -> list[str]:
    names: list[str] = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if not info.name.endswith(".__main__"):  # running it is the command line
                names.append(info.name)
    return names


def _defined_here(module: object, name: str) -> list[type[BaseException]]:
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name
    ]


def _classes_in_source(name: str) -> list[tuple[str, list[str]]]:
    """``(class name, base names)`` of every class a module's source defines at top level."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    tree = ast.parse(Path(spec.origin).read_text(), spec.origin)
    return [
        (node.name, [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases])
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    ]


def _outside_the_root() -> set[str]:
    """Every exception class of the packages not derived from ``SwaEsError``, qualified."""
    outside: set[str] = set()
    known: dict[str, type[BaseException]] = {}
    unimported: list[str] = []
    for name in _module_names():
        try:
            module = importlib.import_module(name)
        except Exception:
            assert name.startswith(NEEDS_AN_ENGINE), f"{name} does not import"
            unimported.append(name)
            continue
        for cls in _defined_here(module, name):
            known[cls.__name__] = cls
            if not issubclass(cls, SwaEsError):
                outside.add(f"{name}.{cls.__qualname__}")
    for name in unimported:
        for class_name, bases in _classes_in_source(name):
            is_error = class_name.endswith(("Error", "Exception"))
            if is_error and not any(
                base == "SwaEsError" or (base in known and issubclass(known[base], SwaEsError))
                for base in bases
            ):
                outside.add(f"{name}.{class_name}")
    assert len(known) > 30, "the walk found too few exception classes to be looking right"
    return outside


def test_every_exception_class_derives_from_the_root() -> None:
    missing = sorted(_outside_the_root())
    assert not missing, f"not derived from SwaEsError: {missing}"


def test_the_root_is_public_and_one_consistency_error() -> None:
    assert swa_es.SwaEsError is SwaEsError
    assert consumers.ReplicaConsistencyError is ReplicaConsistencyError
    assert not hasattr(consumers, "ViewConsistencyError")  # one failure, one name
    assert issubclass(ReplicaConsistencyError, SwaEsError)
    assert issubclass(ReplicaConsistencyError, ValueError)  # as before the root


def test_every_error_says_whether_retrying_can_help() -> None:
    """``retriable`` is the root's (False unless a class or instance knows better): a router
    retries a follower that is restoring or out of reach, never a refused request."""
    from log.errors import LogError, LogLockedError
    from swa_es.client import RoutingConnectionError, RoutingError, RoutingUnavailableError

    assert SwaEsError.retriable is False and LogError.retriable is False
    assert LogLockedError.retriable and RoutingUnavailableError.retriable
    assert RoutingConnectionError.retriable and not RoutingError.retriable
    for name in _module_names():
        if name.startswith(NEEDS_AN_ENGINE):
            continue
        for error in _defined_here(importlib.import_module(name), name):
            if issubclass(error, SwaEsError):
                assert isinstance(error.retriable, bool), error
