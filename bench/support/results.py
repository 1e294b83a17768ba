"""What every benchmark's command line and saved result share: `--json` and `--quick`, sizes,
the machine, saving.

A benchmark prints its table; with `--json PATH` it also saves its figures there, for
`python -m bench.report` to render into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


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
