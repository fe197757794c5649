"""Graceful stop on SIGTERM / SIGINT: cancel a scope so the command can flush and exit, and
remember which signal it was (``Stop``: a service stopped by SIGINT exits 130, by SIGTERM 0)."""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Stop:
    """Why a service stopped: the signal that stopped it (None: none did)."""

    signal: signal.Signals | None = None

    @property
    def interrupted(self) -> bool:
        """Stopped by SIGINT (Ctrl-C)."""
        return self.signal is signal.SIGINT


async def cancel_on_signal(
    scope: anyio.CancelScope,
    stop: Stop | None = None,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Wait for SIGTERM or SIGINT, then note it in ``stop`` and cancel ``scope`` (runs until
    cancelled itself). Started with ``TaskGroup.start``, it returns once the signals are
    caught."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            received = signal.Signals(signum)
            logger.info("got %s, stopping", received.name)
            if stop is not None:
                stop.signal = received
            scope.cancel()
            return
