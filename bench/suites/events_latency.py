"""Emit -> subscriber latency of the workflow log (p50/p99) with 1, 100 and 1,000
subscribers on one workflow, the producer appending one event at a time at a fixed rate.

Each event is emitted on schedule as its own append, without waiting for the previous
one to return (as many concurrent runs would), and carries its emit time; latency is until a
subscriber has it, so it includes the SQL commit. These columns, run in this process one
after the other on the same machine:
- peer: a bare asyncio fan-out (one asyncio.Queue per subscriber), the floor in Python;
- log: the events service's EventLog in-process (SQLite, in-process hot tier), each event
  committed to SQL before it is fanned out; no gRPC;
- grpc: `python -m services.events` as its own process, appends and subscribers over gRPC
  (the deployed path: the appends over one AppendStream call, as the executor's; with
  --unary one Append call each), on SQLite, or on PostgreSQL + Redis with --backend pg;
  with --batched its subscribers use StreamBatches;
- bare grpc (SQLite runs only): the same gRPC subscribers and producer against
  bench/peers/grpc_fanout.py, a bare grpc.aio server keeping each log in a list, its readers
  woken as the events service wakes its own, and ("unpaced") on every append.

    .venv/bin/python -m bench.suites.events_latency [--backend sqlite|pg] [--batched] [--unary]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.support.event_servers import Served, events_service, fanout_peer
from bench.support.meters import CpuMeter
from bench.support.pacing import paced
from bench.support.producer import AppendRefused, Producer
from bench.support.results import add_common_arguments, save
from bench.support.scratch_stores import Backend, backends
from bench.support.spread import latency_summary, quantile
from bench.support.stamps import since, stamp
from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.migrate import migrate
from services.events.records import NewEvent
from services.events.store import SqlEventStore
from shuttle.db import create_engine
from shuttle.envelope import type_value
from shuttle.events_client.append_stream import AppendStreamBroken
from shuttle.grpc_client import tenant_metadata
from shuttle.paced_signal import DEFAULT_SECONDS_PER_WAITER
from shuttle.v1 import common_pb2, events_pb2

TENANT_ID = "bench"
TENANT = tenant_metadata(TENANT_ID)
# (subscribers, events per second, events): the last two keep each run to a few seconds.
CONFIGS = [(1, 1000, 2000), (100, 1000, 1000), (100, 100, 300), (1000, 100, 200)]
QUICK_CONFIGS = [(1, 1000, 300), (100, 1000, 200), (100, 100, 100), (1000, 100, 50)]
# --sequential: wait for each append before the next, as one executor run does; the rate is
# then what one producer reaches.
SEQUENTIAL = False
# --batched: gRPC subscribers use StreamBatches (several events per message) instead of Stream.
BATCHED = False
# The bare gRPC fan-out (bench/peers/grpc_fanout.py), waking its readers as the events service
# does, and on every append.
PEERS = [("bare grpc", DEFAULT_SECONDS_PER_WAITER), ("bare grpc, unpaced", 0.0)]


@dataclass
class Trial:
    latencies: list[float]
    """In ms, one per event and subscriber."""
    reached: float
    """The emit rate actually reached, events/s."""
    failed: int = 0
    """Appends that failed."""
    busy: dict[str, float] = field(default_factory=dict)
    """Share of a core each process used while the events were emitted and read: "bench" is
    this process (producer and subscribers), "server" the one serving them."""


Runner = Callable[[int, float, int], Awaitable[Trial]]


async def peer(subscribers: int, rate: float, count: int) -> Trial:
    queues: list[asyncio.Queue[str]] = [asyncio.Queue() for _ in range(subscribers)]
    latencies: list[float] = []

    async def consume(queue: asyncio.Queue[str]) -> None:
        for _ in range(count):
            latencies.append(since(await queue.get()))

    consumers = [asyncio.create_task(consume(queue)) for queue in queues]
    busy = CpuMeter({"bench": os.getpid()})
    started = time.perf_counter()
    async for _ in paced(rate, count):
        payload = stamp()
        for queue in queues:
            queue.put_nowait(payload)
    reached = count / (time.perf_counter() - started)
    await asyncio.gather(*consumers)
    return Trial(latencies, reached, busy=busy.shares())


def log_runner(data_dir: Path) -> Runner:
    async def run(subscribers: int, rate: float, count: int) -> Trial:
        engine = create_engine(f"sqlite+aiosqlite:///{data_dir / f'log-{subscribers}.db'}")
        await migrate(engine)
        log = EventLog(SqlEventStore(engine), MemoryHotTier())
        workflow_id = (await log.create_workflow(tenant_id="bench")).workflow_id
        latencies: list[float] = []
        ready = asyncio.Barrier(subscribers + 1)

        async def consume() -> None:
            stream = log.stream(workflow_id, "bench", from_seq=1)
            await ready.wait()
            async for event in stream:
                if event.type == "PROGRESS":
                    latencies.append(since(event.payload_json))

        consumers = [asyncio.create_task(consume()) for _ in range(subscribers)]
        await ready.wait()
        busy = CpuMeter({"bench": os.getpid()})
        started = time.perf_counter()
        appends: list[asyncio.Task[list[int]]] = []
        async for _ in paced(rate, count):
            event = NewEvent("PROGRESS", payload_json=stamp())
            appends.append(asyncio.create_task(log.append(workflow_id, "bench", [event])))
            if SEQUENTIAL:
                await appends[-1]
        reached = count / (time.perf_counter() - started)
        await asyncio.gather(*appends)
        await log.append(workflow_id, "bench", [NewEvent("WORKFLOW_COMPLETED")])
        await asyncio.gather(*consumers)
        measured = Trial(latencies, reached, busy=busy.shares())
        await engine.dispose()
        return measured

    return run


def grpc_runner(served: Served, producer: Producer) -> Runner:
    stub = served.stub

    async def run(subscribers: int, rate: float, count: int) -> Trial:
        created = await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=TENANT)
        workflow_id = created.workflow_id
        latencies: list[float] = []
        progress = type_value("PROGRESS")
        request = events_pb2.StreamRequest(workflow_id=workflow_id, from_seq=1)
        calls: list[grpc.aio.UnaryStreamCall[Any, Any]] = [
            (stub.StreamBatches if BATCHED else stub.Stream)(request, metadata=TENANT)
            for _ in range(subscribers)
        ]

        # Measuring starts once every subscriber holds a first event: all streams are open
        # and caught up, so opening them (seconds, for 1,000) is not counted as latency.
        opened = type_value("WORKFLOW_STARTED")
        all_open = asyncio.Event()
        open_count = 0

        async def consume(call: grpc.aio.UnaryStreamCall[Any, Any]) -> None:
            nonlocal open_count
            async for message in call:
                for event in message.events if BATCHED else [message]:
                    if event.type == progress:
                        latencies.append(since(event.payload_json))
                    elif event.type == opened:
                        open_count += 1
                        if open_count == subscribers:
                            all_open.set()

        consumers = [asyncio.create_task(consume(call)) for call in calls]
        await producer.append(
            events_pb2.AppendRequest(
                workflow_id=workflow_id,
                tenant_id=TENANT_ID,
                events=[common_pb2.EventDraft(type=opened)],
            )
        )
        await asyncio.wait_for(all_open.wait(), timeout=300)
        busy = CpuMeter({"bench": os.getpid(), "server": served.pid})
        started = time.perf_counter()

        failures: list[str] = []

        async def emit() -> None:
            try:
                await producer.append(
                    events_pb2.AppendRequest(
                        workflow_id=workflow_id,
                        tenant_id=TENANT_ID,
                        events=[common_pb2.EventDraft(type=progress, payload_json=stamp())],
                    )
                )
            except (grpc.aio.AioRpcError, AppendRefused, AppendStreamBroken) as exc:
                failures.append(str(exc))  # a refused append is a figure, not a crash

        appends: list[asyncio.Task[None]] = []
        async for _ in paced(rate, count):
            appends.append(asyncio.create_task(emit()))
            if SEQUENTIAL:
                await appends[-1]
        reached = count / (time.perf_counter() - started)
        await asyncio.gather(*appends)
        await stub.Append(
            events_pb2.AppendRequest(
                workflow_id=workflow_id,
                events=[common_pb2.EventDraft(type=type_value("WORKFLOW_COMPLETED"))],
            ),
            metadata=TENANT,
        )
        await asyncio.gather(*consumers)
        return Trial(latencies, reached, len(failures), busy.shares())

    return run


async def producer_of(stack: contextlib.AsyncExitStack, served: Served, unary: bool) -> Producer:
    producer = Producer(served.stub, unary=unary)
    stack.push_async_callback(producer.close)
    return producer


def summary(trial: Trial, expected: int) -> dict[str, object]:
    return {
        "failed_appends": trial.failed,
        **latency_summary(trial.latencies),
        "reached_per_s": trial.reached,
        "delivered": len(trial.latencies),
        "expected": expected,
        "busy_cores": trial.busy,
    }


def row(label: str, trial: Trial, expected: int) -> str:
    latencies = trial.latencies
    busy = "  ".join(f"{name} {share:4.0%}" for name, share in trial.busy.items())
    return (
        f"{label:>5} p50 {quantile(latencies, 0.5):8.2f} ms  p99 "
        f"{quantile(latencies, 0.99):8.2f} ms  emitted {trial.reached:6.0f}/s  "
        f"delivered {len(latencies)}/{expected}  busy: {busy}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--sequential", action="store_true", help="await each append")
    parser.add_argument("--batched", action="store_true", help="gRPC subscribers use StreamBatches")
    parser.add_argument(
        "--unary", action="store_true", help="one Append call per event instead of AppendStream"
    )
    parser.add_argument(
        "--grpc-only",
        action="store_true",
        help="only the grpc column (peer and log do not depend on --backend)",
    )
    add_common_arguments(parser)
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    global SEQUENTIAL, BATCHED
    SEQUENTIAL = args.sequential
    BATCHED = args.batched
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch)
        async with backends(data_dir, with_redis=True) as found:
            backend: Backend = found[-1] if args.backend == "pg" else found[0]
            if args.backend == "pg" and backend.label == "sqlite":
                raise SystemExit("PostgreSQL is not reachable on 127.0.0.1:5432")
            async with contextlib.AsyncExitStack() as stack:
                served = await stack.enter_async_context(events_service(backend, data_dir))
                runners: list[tuple[str, Runner]] = [
                    ("peer", peer),
                    ("log", log_runner(data_dir)),
                    ("grpc", grpc_runner(served, await producer_of(stack, served, args.unary))),
                ]
                if args.grpc_only:
                    runners = runners[-1:]
                if backend.label == "sqlite":
                    for label, per_reader in PEERS:
                        peer_served = await stack.enter_async_context(fanout_peer(per_reader))
                        peer_producer = await producer_of(stack, peer_served, args.unary)
                        runners.append((label, grpc_runner(peer_served, peer_producer)))
                print(f"grpc column: events service on {backend.label}")
                for subscribers, rate, count in QUICK_CONFIGS if args.quick else CONFIGS:
                    print(f"{subscribers} subscribers, {rate:.0f} events/s, {count} events:")
                    measured: dict[str, object] = {
                        "subscribers": subscribers,
                        "rate": rate,
                        "events": count,
                    }
                    for label, runner in runners:
                        trial = await runner(subscribers, rate, count)
                        expected = subscribers * count
                        print("  " + row(label, trial, expected))
                        measured[label] = summary(trial, expected)
                        if trial.failed:
                            print(f"  {label}: {trial.failed} appends failed")
                    rows.append(measured)
    settings = {"backend": args.backend, "sequential": args.sequential, "unary": args.unary}
    save(args.json, "events_latency", settings, {"backend": backend.label, "rows": rows})


if __name__ == "__main__":
    asyncio.run(main())
