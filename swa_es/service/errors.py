"""Errors of the services (``serve``, ``follow``, ``bridge``) that name the setting at fault."""

from __future__ import annotations

from cache.errors import SwaEsError


class ServiceError(SwaEsError):
    """Base of the errors a service raises on purpose."""


class ListenError(ServiceError, OSError):
    """A server could not listen where it was told to: ``setting`` names the flag and its value
    (``--http-port 8080``), ``address`` the ``host:port`` it tried, ``reason`` why not."""

    def __init__(self, setting: str, reason: str, address: str) -> None:
        self.setting = setting
        self.reason = reason
        self.address = address
        super().__init__(f"{setting}: {reason} ({address})")


class ServicePathError(ServiceError, OSError):
    """A file a service was told to write cannot be written: ``setting`` names the flag and
    its value (``--status-file /x/s.json``), ``reason`` why not."""

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        self.reason = reason
        super().__init__(f"{setting}: {reason}")
