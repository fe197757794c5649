"""Which optional extra of the ``swa-es`` distribution brings which third-party module.

The core install (the wheel ``tools/build_wheel.sh`` builds, with no extra) holds the log, the
follower and the codec; torch, Kafka, the engine bridge and the HTTP services are extras, so a
follower or a bridge need not install torch. A command that meets a missing one says which
extra to install instead of a traceback.
"""

from __future__ import annotations

from typing import Final

from cache.errors import SwaEsError

EXTRA_OF_MODULE: Final[dict[str, str]] = {
    "torch": "cache",
    "aiokafka": "kafka",
    "zmq": "bridge",
    "msgpack": "bridge",
    "starlette": "service",
    "httptools": "service",
    "httpx": "client",
    "prometheus_client": "service",
}
"""Top-level module name -> the extra of the swa-es wheel that installs it."""


def install_hint(extra: str) -> str:
    """How to install ``extra``: swa-es is not on a package index, so the hint names the wheel
    built from the repository (docs/deploy.md, "Install")."""
    return (
        f"install the swa-es wheel with the '{extra}' extra "
        f'(pip install "$(ls dist/swa_es-*.whl)[{extra}]" after bash tools/build_wheel.sh)'
    )


class MissingExtraError(SwaEsError):
    """A command needs a module of an optional extra that is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(f"needs {module}, which is not installed: {install_hint(extra)}")
        self.module = module
        self.extra = extra


def missing_extra(exc: BaseException) -> MissingExtraError | None:
    """``exc`` as a :class:`MissingExtraError` when it is the import of an extra's module that
    failed, else None."""
    if isinstance(exc, MissingExtraError):
        return exc
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".", 1)[0]
    extra = EXTRA_OF_MODULE.get(module)
    return None if extra is None else MissingExtraError(module, extra)
