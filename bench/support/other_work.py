"""How much CPU processes outside a benchmark used while it ran.

A benchmark loads the machine itself (five services and a load generator on a few cores), so
the load average at its end says nothing about other work. This counts the machine's busy CPU
time (/proc/stat) minus what the benchmark's own processes used (reaped children's rusage),
over the benchmark's wall time. PostgreSQL and Redis serve the benchmarks but are not their
children: their share counts as other work.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest is in user).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def busy_cpu_seconds() -> float:
    """CPU time all processes of the machine have been busy for, since boot."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(fields[i]) for i in _BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class OtherWork:
    """A reading taken before a benchmark starts; `cpus_used` after its process is reaped."""

    started: float
    busy: float
    own: float

    @classmethod
    def start(cls) -> OtherWork:
        return cls(time.monotonic(), busy_cpu_seconds(), children_cpu_seconds())

    def cpus_used(self) -> float:
        """CPUs' worth of time others used on average meanwhile (0.5: half a CPU)."""
        elapsed = time.monotonic() - self.started
        others = (busy_cpu_seconds() - self.busy) - (children_cpu_seconds() - self.own)
        return max(others, 0.0) / elapsed if elapsed > 0 else 0.0


def record(results_file: Path, cpus_used: float) -> None:
    """Add the reading to a saved result's machine description."""
    if not results_file.exists():
        return
    document = json.loads(results_file.read_text())
    document.setdefault("machine", {})["other_cpus"] = round(cpus_used, 2)
    results_file.write_text(json.dumps(document, indent=2, allow_nan=True) + "\n")
