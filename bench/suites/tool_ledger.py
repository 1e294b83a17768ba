"""What the tool-call ledger's two statements cost on their own, outside the running stack.

Records `--calls` calls as a first call does (the running row, then the outcome) against a
ledger opened as the tools service opens it, on a SQLite file and, when it is reachable, on
the local PostgreSQL (a scratch database, dropped after), and prints the median and p90 per
call of each.
Compare with `bench.suites.react_overhead`, which measures the ledger inside the stack.

    .venv/bin/python -m bench.suites.tool_ledger [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.support.scratch_stores import postgres_database
from services.tools.db import create_schema
from services.tools.ledger import Fingerprint
from services.tools.ledger_storage import open_ledger
from shuttle.db import create_engine
from shuttle.sql_transactions import writes_for
from shuttle.tool_calls import ToolCall, ToolOutcome


async def measure(calls: int, database_url: str) -> list[float]:
    """Seconds per recorded call (running row, then outcome), in call order."""
    engine = create_engine(database_url)
    await create_schema(engine)
    writes = writes_for(engine)
    ledger, close = await open_ledger(engine, writes)
    took: list[float] = []
    try:
        for index in range(calls):
            call = ToolCall(
                tool_name="calculator",
                arguments_json='{"expression": "6*7"}',
                call_id=f"agent-main.{index}.0",
                workflow_id="wf-bench",
                tenant_id="bench",
                agent_id="agent-main",
            )
            started = time.perf_counter()
            await ledger.start(call, Fingerprint.of(call), "bench", datetime.now(UTC))
            await ledger.finish(call, ToolOutcome(observation="42"), datetime.now(UTC))
            took.append(time.perf_counter() - started)
    finally:
        await close()
        await writes.close()
        await engine.dispose()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls recorded (300)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(measure_each(args.calls, Path(directory)))


async def measure_each(calls: int, directory: Path) -> None:
    async with postgres_database() as postgres_url:
        databases = {"SQLite": f"sqlite+aiosqlite:///{directory / 'shuttle.db'}"}
        if postgres_url is None:
            print("PostgreSQL is not reachable on 127.0.0.1:5432: its row is left out")
        else:
            databases["PostgreSQL"] = postgres_url
        for name, url in databases.items():
            ms = sorted(1000 * t for t in await measure(calls, url))
            p90 = ms[int(0.9 * (len(ms) - 1))]
            print(
                f"tool ledger on {name}, {len(ms)} calls: median {statistics.median(ms):.3f} "
                f"ms per call (running row + outcome), p90 {p90:.3f} ms"
            )


if __name__ == "__main__":
    main()
