"""Which asyncio event loop a service runs on: uvloop where it is installed, for the routing API.

uvloop's loop and transports are written in C; serving ``/v1/match`` on it takes less CPU and
time per request than on the standard loop (``bench/http_bench.py --loop uvloop|asyncio``
measures both). Everything else a follower does runs on it unchanged (anyio supports it).
"""

from __future__ import annotations

import importlib.util
from typing import Any


def fast_loop_options() -> dict[str, Any]:
    """anyio's asyncio ``backend_options``: uvloop when importable, else the standard loop."""
    if importlib.util.find_spec("uvloop") is None:
        return {}
    return {"use_uvloop": True}
