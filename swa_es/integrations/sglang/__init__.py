"""SWA residency in sglang's own KV-event stream.

sglang's caches free the SWA KV of a prefix (a *tombstone*) and restore it without saying so on
their event stream, so nothing downstream can tell which cached prefix is still usable under the
sliding window. ``install()`` makes sglang's own SWA cache record ``BlockSWAEvicted`` and
``BlockSWARestored`` (``swa_es.integrations.sglang.wire``) into its own event queue, which
sglang's own scheduler hands to its own ``ZmqEventPublisher``; the window travels in each event.
``swa-es bridge --format sglang`` (or ``auto``) reads them.

Off unless installed: nothing here touches sglang until ``install()`` is called, in the process
that builds the cache, before the cache is built. ``python -m
swa_es.integrations.sglang.launch_server ARGS...`` is sglang's launcher with ``install()`` done
first, in the launcher and in every process it spawns. See docs/sglang.md.

Supported: sglang 0.5.16 (``SWARadixCache``) and 0.5.23 (``UnifiedRadixCache`` with FULL and SWA
components, under its default Rust tree core or its Python one). Any other release raises
``UnsupportedSglangError``: the integration changes sglang internals that differ between
releases, and guessing would publish a wrong stream.
"""

from __future__ import annotations

from typing import Final

from cache.errors import SwaEsError
from swa_es.integrations.sglang.wire import SWA_EVENT_FIELDS, SWA_EVICTED, SWA_RESTORED

SUPPORTED_VERSIONS: Final = ("0.5.16", "0.5.23")
"""The sglang releases ``install()`` knows."""

_installed: str | None = None


class UnsupportedSglangError(SwaEsError, RuntimeError):
    """The sglang found is not a release ``install()`` knows (or not importable at all)."""


def installed() -> str | None:
    """The sglang version the integration is installed into in this process, None if not."""
    return _installed


def install() -> str:
    """Make sglang's own SWA cache publish SWA tombstone and restore events; idempotent.

    Returns the sglang version it hooked. Raises ``UnsupportedSglangError`` when sglang is
    missing or its version is not in ``SUPPORTED_VERSIONS``.
    """
    global _installed
    if _installed is not None:
        return _installed
    try:
        import sglang
    except ImportError as exc:
        raise UnsupportedSglangError(f"sglang is not importable here: {exc}") from exc
    version = str(getattr(sglang, "__version__", "unknown"))
    if version not in SUPPORTED_VERSIONS:
        supported = ", ".join(SUPPORTED_VERSIONS)
        raise UnsupportedSglangError(
            f"sglang {version} is not supported by swa_es.integrations.sglang "
            f"(supported: {supported}); nothing was changed"
        )
    from sglang.srt.disaggregation.kv_events import ZmqEventPublisher

    from swa_es.integrations.sglang import publishing

    if version == "0.5.16":
        from swa_es.integrations.sglang import v0516

        v0516.install()
    else:
        from swa_es.integrations.sglang import v0523

        v0523.install()
    publishing.install(ZmqEventPublisher)
    _installed = version
    return version


__all__ = [
    "install",
    "installed",
    "UnsupportedSglangError",
    "SUPPORTED_VERSIONS",
    "SWA_EVICTED",
    "SWA_RESTORED",
    "SWA_EVENT_FIELDS",
]
