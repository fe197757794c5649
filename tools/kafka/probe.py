"""Readiness probe for kafka.sh: succeeds once the cluster answers metadata with every broker.

Usage: probe.py BOOTSTRAP BROKERS TIMEOUT_S. Exits 0 when a metadata request through BOOTSTRAP
lists at least BROKERS brokers, 1 when TIMEOUT_S passes first.
"""

from __future__ import annotations

import asyncio
import sys
import time

from aiokafka.admin import AIOKafkaAdminClient


async def brokers_seen(bootstrap: str) -> int:
    """How many brokers a fresh metadata request through ``bootstrap`` lists."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        return len(cluster["brokers"])
    finally:
        await admin.close()


async def wait_ready(bootstrap: str, brokers: int, timeout_s: float) -> bool:
    """Retry the metadata probe until it lists ``brokers`` brokers or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if await brokers_seen(bootstrap) >= brokers:
                return True
        except Exception as error:  # any failure means "not ready yet"
            print(f"probe: not ready yet: {error!r}", file=sys.stderr)
        await asyncio.sleep(0.5)
    return False


def main() -> int:
    """Entry point: parse the three arguments and run the probe."""
    bootstrap, brokers, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    return 0 if asyncio.run(wait_ready(bootstrap, brokers, timeout_s)) else 1


if __name__ == "__main__":
    sys.exit(main())
