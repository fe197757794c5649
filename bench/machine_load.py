"""What else the machine was doing while a benchmark ran: its load and the CPU time the
hypervisor gave to other guests (steal), read from Linux's ``/proc``.

A shared VM's figures move with its neighbours; a benchmark prints this row beside them so
that a reader can tell a quiet run from a crowded one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CpuTicks:
    """The machine's CPU time so far, all CPUs together, in clock ticks."""

    total: int
    steal: int

    @classmethod
    def now(cls) -> CpuTicks | None:
        """The counters now, or None where ``/proc/stat`` is not there (not Linux)."""
        try:
            first = _PROC_STAT.read_text().splitlines()[0].split()
        except OSError:
            return None
        # cpu user nice system idle iowait irq softirq steal guest guest_nice; guest time is
        # already counted in user and nice
        ticks = [int(value) for value in first[1:9]]
        return cls(total=sum(ticks), steal=ticks[7] if len(ticks) > 7 else 0)


def steal_share_since(since: CpuTicks | None) -> float | None:
    """The share of the machine's CPU time stolen by the hypervisor since ``since`` (0.2: a
    fifth of it went to other guests), or None where it cannot be told."""
    until = CpuTicks.now()
    if since is None or until is None or until.total <= since.total:
        return None
    return round((until.steal - since.steal) / (until.total - since.total), 3)


def machine_row(since: CpuTicks | None) -> dict[str, object]:
    """CPUs, the 1-minute load average and the steal share since ``since`` when known."""
    row: dict[str, object] = {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]}
    steal = steal_share_since(since)
    if steal is not None:
        row["steal_share"] = steal
    return row
