"""What the hook chain costs per tool call, beside the same calls with no hooks.

Both sides run the calculator through ToolHost.execute in the same process; the hooked side
has the deployment defaults (read-only guard, truncation, audit row in SQLite) plus an
in-process rate limiter, so the difference is the policy layer.

    .venv/bin/python -m bench.suites.tool_hooks [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench.support.results import add_common_arguments, save, sized
from bench.support.spread import Spread, quantile
from services.tools.buckets import MemoryBuckets
from services.tools.builtins.calculator import Calculator
from services.tools.catalog import ToolRegistry
from services.tools.db import create_schema
from services.tools.hooks.chain import HookChain
from services.tools.hooks.config import HooksConfig, build_chain
from services.tools.hooks.rate_limit import RateLimitHook
from services.tools.host import ToolHost
from shuttle.db import create_engine
from shuttle.sql_transactions import writes_for
from shuttle.tool_calls import ToolCall


async def timed(host: ToolHost, calls: int) -> list[float]:
    request = ToolCall(
        tool_name="calculator", arguments_json='{"expression": "sqrt(2) * 12"}', tenant_id="t"
    )
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        result = await host.execute(request)
        samples.append((time.perf_counter() - started) * 1e6)
        assert result.ok, result.observation
    return samples


def describe(name: str, samples: list[float]) -> str:
    spread = Spread.of(samples)
    p95 = quantile(samples, 0.95)
    return f"{name:<28} median {spread.median:8.1f} µs   p95 {p95:8.1f} µs"


async def main(args: argparse.Namespace) -> None:
    calls = sized(args.calls, args.quick, full=2000, small=200)
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")
        await create_schema(engine)
        audit_writes = writes_for(engine)
        defaults = build_chain(
            HooksConfig(),
            audit_writes=audit_writes,
            approvals=None,
            buckets=MemoryBuckets(),
            approval_timeout_seconds=60,
            max_observation_chars=20_000,
        )
        limiter = RateLimitHook(capacity=1e9, refill_per_second=1e9)
        hooked = ToolHost(ToolRegistry([Calculator()]), hooks=HookChain([*defaults.hooks, limiter]))
        bare = ToolHost(ToolRegistry([Calculator()]))
        await timed(bare, 50)
        await timed(hooked, 50)
        without = await timed(bare, calls)
        print(describe("no hooks", without))
        hooks = await timed(hooked, calls)
        print(describe("defaults + rate limit", hooks))
        await defaults.drain()
        await audit_writes.close()
        await engine.dispose()
    figures = {
        side: {**Spread.of(samples).as_dict(), "p95": quantile(samples, 0.95)}
        for side, samples in (("no_hooks_us", without), ("hooks_us", hooks))
    }
    save(args.json, "tool_hooks", {"calls": calls}, figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, help="calls per side (2000; quick 200)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
