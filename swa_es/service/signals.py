"""Graceful stop on SIGTERM / SIGINT: cancel a scope so the command can flush and exit."""

from __future__ import annotations

import logging
import signal

import anyio

logger = logging.getLogger(__name__)


async def cancel_on_signal(scope: anyio.CancelScope) -> None:
    """Wait for SIGTERM or SIGINT, then cancel ``scope`` (runs until cancelled itself)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            logger.info("got %s, stopping", signal.Signals(signum).name)
            scope.cancel()
            return
