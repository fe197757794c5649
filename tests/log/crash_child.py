"""Child process for the cross-process FileLog tests (run with ``python -m``).

``append DIR [--fsync P] [--count N] [--seed S] [--segment-bytes B]`` opens DIR as the writer,
prints ``start <end offset>``, then appends records (singly and in small batches) and prints
``ack <last offset>`` after each acknowledged append, flushing every line; it stops after N
records (or runs until killed). ``hold DIR`` takes the writer lock, prints ``locked`` and keeps
it until stdin closes. Payloads are a pure function of the offset (``expected_payload``), so a
parent can check any record it reads.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path

import anyio

from log.file import FileLog


def expected_payload(offset: int) -> bytes:
    """The payload the child writes at ``offset``: a varying length, self-checking."""
    digest = hashlib.sha256(str(offset).encode()).digest()
    return f"{offset}:".encode() + digest * (1 + offset % 37) + b"$"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _append(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    log = await FileLog.open(args.directory, fsync=args.fsync, segment_bytes=args.segment_bytes)
    async with log:
        next_offset = (await log.end()).get(0)
        _say(f"start {next_offset}")
        appended = 0
        while args.count is None or appended < args.count:
            size = rng.choice([1, 1, 1, 2, 5])
            if args.count is not None:
                size = min(size, args.count - appended)
            offsets = range(next_offset, next_offset + size)
            if size == 1:
                await log.append("child", expected_payload(next_offset))
            else:
                await log.append_batch([("child", expected_payload(o)) for o in offsets])
            next_offset += size
            appended += size
            _say(f"ack {next_offset - 1}")


async def _hold(args: argparse.Namespace) -> None:
    async with await FileLog.open(args.directory):
        _say("locked")
        await anyio.to_thread.run_sync(sys.stdin.read)


def main() -> None:
    """Parse the command line and run the chosen role."""
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["append", "hold"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--fsync", default="always", choices=["always", "batch", "never"])
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024)
    args = parser.parse_args()
    anyio.run(_append if args.role == "append" else _hold, args)


if __name__ == "__main__":
    main()
