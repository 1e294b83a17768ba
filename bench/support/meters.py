"""What a process uses, read from Linux /proc: resident memory, CPU time, open sockets."""

from __future__ import annotations

import os
import time
from pathlib import Path


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class CpuMeter:
    """The CPU some processes use from the meter's creation on (Linux /proc)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = dict(pids)
        self.restart()

    def restart(self) -> None:
        """Count from now on."""
        self._before = {name: cpu_seconds(pid) for name, pid in self._pids.items()}
        self._started = time.perf_counter()

    def seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) each process has used since."""
        return {name: cpu_seconds(pid) - self._before[name] for name, pid in self._pids.items()}

    def shares(self) -> dict[str, float]:
        """The same as a share of one core over the wall time since (1.0 = a whole core)."""
        wall = time.perf_counter() - self._started
        return {name: used / wall for name, used in self.seconds().items()}


def open_sockets(pid: int) -> int:
    """How many sockets a process holds open."""
    count = 0
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(entry).startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count
