"""What every benchmark shares: `--json` and `--quick`, spread statistics, the machine, saving.

A benchmark prints its table; with `--json PATH` it also saves its figures there, for
`python -m bench.report` to render into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Spread:
    """A median with its quartiles and extremes, over repeats or samples."""

    median: float
    p25: float
    p75: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        if not samples:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, 0)
        ordered = sorted(samples)
        if len(ordered) == 1:
            p25 = p75 = ordered[0]
        else:
            quartiles = statistics.quantiles(ordered, n=4, method="inclusive")
            p25, p75 = quartiles[0], quartiles[2]
        return cls(statistics.median(ordered), p25, p75, ordered[0], ordered[-1], len(ordered))

    def scaled(self, factor: float) -> Spread:
        return Spread(
            self.median * factor,
            self.p25 * factor,
            self.p75 * factor,
            self.low * factor,
            self.high * factor,
            self.count,
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.median:.2f} [{self.p25:.2f}-{self.p75:.2f}]"


def quantile(samples: list[float], fraction: float) -> float:
    """The sample at `fraction` of the sorted samples (nearest rank); NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50": quantile(samples_ms, 0.50),
        "p95": quantile(samples_ms, 0.95),
        "p99": quantile(samples_ms, 0.99),
        "max": max(samples_ms) if samples_ms else float("nan"),
        "count": len(samples_ms),
    }


def memory_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


REFERENCE_LOOP_ADDITIONS = 2_000_000


def reference_loop_ms() -> float:
    """How fast this machine runs plain Python: the best of three timings of a fixed loop.
    Machines of the same description differ by twofold or more, and so do all the figures."""
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(REFERENCE_LOOP_ADDITIONS):
            total += i
        timings.append((time.perf_counter() - started) * 1000)
    return min(timings)


def machine() -> dict[str, Any]:
    """Where and when the figures were measured."""
    return {
        "reference_loop_ms": reference_loop_ms(),
        "cpus": os.cpu_count() or 0,
        "memory_bytes": memory_total_bytes(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "processor": platform.machine(),
        "load_average": list(os.getloadavg()),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="also save the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")


def sized(value: int | None, quick: bool, full: int, small: int) -> int:
    """An explicit size wins; otherwise the full or the quick default."""
    if value is not None:
        return value
    return small if quick else full


def save(path: Path | None, benchmark: str, settings: dict[str, Any], figures: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": benchmark,
        "command": " ".join([Path(sys.executable).name, "-m", *sys.argv]),
        "machine": machine(),
        "settings": settings,
        "figures": figures,
    }
    path.write_text(json.dumps(document, indent=2, allow_nan=True) + "\n")
    print(f"figures saved to {path}")


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
