"""The routing API's protocol subclasses uvicorn's private ``HttpToolsProtocol``: it runs only on
the uvicorn releases it is tested with (``UVICORN_TESTED``), and pyproject pins exactly those."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from swa_es.service.http_protocol import UVICORN_TESTED

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _tested_range() -> str:
    (low_major, low_minor), (high_major, high_minor) = UVICORN_TESTED
    return f">={low_major}.{low_minor},<{high_major}.{high_minor}"


def test_installed_uvicorn_is_a_tested_release() -> None:
    installed = version("uvicorn")
    found = re.match(r"(\d+)\.(\d+)", installed)
    assert found is not None, f"uvicorn version {installed!r} is not major.minor..."
    major_minor = (int(found.group(1)), int(found.group(2)))
    low, high = UVICORN_TESTED
    assert low <= major_minor < high, (
        f"uvicorn {installed} is not a release swa_es/service/http_protocol.py is tested with "
        f"(uvicorn{_tested_range()}): check the HttpToolsProtocol internals it reads, run "
        "tests/service, then widen UVICORN_TESTED and pyproject's pin together"
    )


def test_pyproject_pins_the_tested_range() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = [
        requirement
        for extra in project["optional-dependencies"].values()
        for requirement in extra
        if re.match(r"uvicorn\b", requirement)
    ]
    assert requirements, "no extra of pyproject.toml names uvicorn"
    assert set(requirements) == {f"uvicorn{_tested_range()}"}, requirements
