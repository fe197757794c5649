"""The demo's terminal view: a rich live table on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from rich.console import Console
from rich.live import Live
from rich.table import Table


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker's line: what its primary did and what the follower holds of it."""

    source: str
    requests: int
    events: int
    batches: int
    resyncs: int
    blocks: int
    tombstones: int
    lag_batches: int


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything one refresh shows."""

    elapsed_s: float
    duration_s: float
    rows: tuple[WorkerRow, ...]
    applied_batches: int
    divergences: int


class RateMeter:
    """Per-key rates of monotonically growing totals, between successive readings."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}

    def rate(self, key: str, total: int, now_s: float) -> float:
        """Growth of ``total`` per second since the last reading of ``key`` (0 at the first)."""
        previous = self._last.get(key)
        self._last[key] = (now_s, total)
        if previous is None or now_s <= previous[0]:
            return 0.0
        return (total - previous[1]) / (now_s - previous[0])


def render_table(frame: Frame, meter: RateMeter, now_s: float) -> Table:
    """The live table of one frame."""
    table = Table(
        title=f"swa-es demo  {frame.elapsed_s:5.1f}/{frame.duration_s:.0f} s   "
        f"follower: {frame.applied_batches} batches applied, {frame.divergences} divergences",
        title_justify="left",
        caption="lag: batches published but not yet applied by the follower",
        caption_justify="left",
    )
    for column in (
        "worker",
        "requests",
        "events/s",
        "batches",
        "resyncs",
        "lag",
        "blocks",
        "tombstones",
    ):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for row in frame.rows:
        events_per_s = meter.rate(row.source, row.events, now_s)
        table.add_row(
            row.source,
            str(row.requests),
            f"{events_per_s:,.0f}",
            str(row.batches),
            str(row.resyncs),
            str(row.lag_batches),
            str(row.blocks),
            str(row.tombstones),
        )
    return table


def plain_lines(frame: Frame, meter: RateMeter, now_s: float) -> list[str]:
    """One line per worker, for logs and pipes."""
    return [
        f"[{frame.elapsed_s:5.1f}s] {row.source}: requests={row.requests} "
        f"events/s={meter.rate(row.source, row.events, now_s):.0f} batches={row.batches} "
        f"resyncs={row.resyncs} lag={row.lag_batches} blocks={row.blocks} "
        f"tombstones={row.tombstones}"
        for row in frame.rows
    ]


async def show_live(
    console: Console, frames: Callable[[], Frame], *, refresh_s: float, plain_every_s: float = 2.0
) -> None:
    """Redraw ``frames()`` every ``refresh_s`` until cancelled (plain lines off a terminal)."""
    meter = RateMeter()
    for row in frames().rows:
        meter.rate(row.source, row.events, time.monotonic())
    if not console.is_terminal:
        while True:
            await anyio.sleep(plain_every_s)
            for line in plain_lines(frames(), meter, time.monotonic()):
                console.print(line, highlight=False, soft_wrap=True)
    with Live(console=console, auto_refresh=False, transient=False) as live:
        while True:
            live.update(render_table(frames(), meter, time.monotonic()), refresh=True)
            await anyio.sleep(refresh_s)
