"""Events through the real gateway to many SSE clients: events/s and append -> client latency.

The five Shuttle processes run on the embedded defaults (SQLite, in-process hot tier). N SSE
clients (raw sockets in this process) follow one workflow at GET /api/v1/stream/sse; the
producer appends to the events service over one AppendStream call, as the executor does
(--unary: one Append call per batch). The gateway follows
the workflow with one EventService.StreamBatches call for all of them (gateway/fanout.py).

- throughput: the producer appends batches back to back; events/s is events appended per
  second until every client has them all, frames/s is events x clients over that time.
- latency: single-event appends at a fixed rate, each carrying its emit time (not waiting
  for the previous append, as many producers would); latency runs from just before the
  append to the client holding the event's bytes, so it includes the SQL commit, the events
  service, the gateway and this process's own event loop.

    .venv/bin/python -m bench.suites.sse_fanout [--clients 1 100 1000] [--unary] [--quick]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

from bench.support.pacing import paced
from bench.support.producer import Producer
from bench.support.results import add_common_arguments, save
from bench.support.spread import latency_summary
from bench.support.sse_clients import (
    SseClient,
    close_all,
    open_clients,
    raise_open_files_limit,
    wait_until,
)
from bench.support.stack import STACK_ENV, running_stack
from bench.support.stamps import stamp
from shuttle.envelope import type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

TENANT = "default"  # the gateway's tenant with authentication off
METADATA = tenant_metadata(TENANT)
PROGRESS = type_value("PROGRESS")
COMPLETED = type_value("WORKFLOW_COMPLETED")
BATCH = 50


class Fanout:
    def __init__(
        self, events: events_pb2_grpc.EventServiceAsyncStub, gateway: str, producer: Producer
    ) -> None:
        self.events = events
        self.producer = producer
        address = urlsplit(gateway)
        self.host, self.port = address.hostname or "127.0.0.1", address.port or 80

    async def followed_workflow(
        self, clients: int, latencies: list[float]
    ) -> tuple[str, list[SseClient]]:
        """A new workflow with `clients` SSE clients, each shown to hold a live stream."""
        created = await self.events.CreateWorkflow(
            events_pb2.CreateWorkflowRequest(tenant_id=TENANT), metadata=METADATA
        )
        workflow_id = created.workflow_id
        path = f"/api/v1/stream/sse?workflow_id={workflow_id}"
        followers = await open_clients(self.host, self.port, path, clients, latencies)
        await self.append(workflow_id, [common_pb2.EventDraft(type=PROGRESS, payload_json="{}")])
        await wait_until(lambda: all(c.frames for c in followers), 300, "the first event")
        return workflow_id, followers

    async def append(self, workflow_id: str, drafts: list[common_pb2.EventDraft]) -> None:
        request = events_pb2.AppendRequest(workflow_id=workflow_id, tenant_id=TENANT, events=drafts)
        await self.producer.append(request)

    async def finish(self, workflow_id: str, followers: list[SseClient]) -> None:
        await self.append(workflow_id, [common_pb2.EventDraft(type=COMPLETED)])
        await wait_until(lambda: all(c.ended for c in followers), 600, "STREAM_END everywhere")
        close_all(followers)

    async def throughput(self, clients: int, events: int) -> dict[str, Any]:
        latencies: list[float] = []
        workflow_id, followers = await self.followed_workflow(clients, latencies)
        before = [c.frames for c in followers]
        started = time.perf_counter()
        for offset in range(0, events, BATCH):
            size = min(BATCH, events - offset)
            await self.append(
                workflow_id, [common_pb2.EventDraft(type=PROGRESS, payload_json=stamp())] * size
            )
        appended = time.perf_counter() - started
        target = [b + events for b in before]
        await wait_until(
            lambda: all(c.frames >= t for c, t in zip(followers, target, strict=True)),
            600,
            "every event at every client",
        )
        delivered = time.perf_counter() - started
        await self.finish(workflow_id, followers)
        return {
            "clients": clients,
            "events": events,
            "appended_per_s": events / appended,
            "events_per_s": events / delivered,
            "frames_per_s": events * clients / delivered,
        }

    async def latency(self, clients: int, rate: float, events: int) -> dict[str, Any]:
        latencies: list[float] = []
        workflow_id, followers = await self.followed_workflow(clients, latencies)
        started = time.perf_counter()
        appends: list[asyncio.Task[None]] = []
        async for _ in paced(rate, events):
            draft = common_pb2.EventDraft(type=PROGRESS, payload_json=stamp())
            appends.append(asyncio.create_task(self.append(workflow_id, [draft])))
        reached = events / (time.perf_counter() - started)
        await asyncio.gather(*appends)
        await self.finish(workflow_id, followers)
        return {
            "clients": clients,
            "rate": rate,
            "events": events,
            "reached_per_s": reached,
            "latency_ms": latency_summary(latencies),
            "delivered": len(latencies),
            "expected": clients * events,
        }


def latency_plan(clients: list[int], quick: bool) -> list[tuple[int, float, int]]:
    """(clients, events/s, events): the same rate for every client count, then the target's
    1,000 events/s to 100 clients and a light rate for the most clients."""
    # Events x clients is the work: the most clients get fewer events.
    plan = [(n, 100.0, min(100 if quick else 300, 100_000 // n)) for n in clients]
    if 100 in clients:
        plan.append((100, 1000.0, 300 if quick else 1000))
    if max(clients) >= 1000:
        plan.append((max(clients), 10.0, 50))
    return plan


async def main(args: argparse.Namespace) -> None:
    raise_open_files_limit()
    clients = args.clients or ([1, 20, 100] if args.quick else [1, 100, 1000])
    throughput: list[dict[str, Any]] = []
    latency: list[dict[str, Any]] = []
    with running_stack(STACK_ENV) as stack:
        channel = stack.channel("events")
        stub = events_pb2_grpc.EventServiceStub(channel)
        producer = Producer(stub, unary=args.unary)
        fanout = Fanout(stub, stack.gateway, producer)
        try:
            for n in clients:
                # Events x clients is the work: the most clients get fewer events.
                events = min(5_000, max(100, 20_000 // n))
                row = await fanout.throughput(n, events)
                throughput.append(row)
                print(
                    f"throughput {n:>5} clients: {row['events_per_s']:8,.0f} events/s "
                    f"({row['appended_per_s']:,.0f}/s appended), "
                    f"{row['frames_per_s']:9,.0f} frames/s"
                )
            for n, rate, count in latency_plan(clients, args.quick):
                row = await fanout.latency(n, rate, count)
                latency.append(row)
                q = row["latency_ms"]
                print(
                    f"latency {n:>5} clients at {rate:5.0f}/s (reached {row['reached_per_s']:5.0f})"
                    f": p50 {q['p50']:8.1f}  p95 {q['p95']:8.1f}  p99 {q['p99']:8.1f} ms"
                    f"  delivered {row['delivered']}/{row['expected']}"
                )
        finally:
            await producer.close()
            await channel.close()
    save(
        args.json,
        "sse_fanout",
        {"clients": clients, "batch": BATCH, "backend": "sqlite", "unary": args.unary},
        {"throughput": throughput, "latency": latency},
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", help="SSE clients (1 100 1000)")
    parser.add_argument(
        "--unary", action="store_true", help="one Append call per batch instead of AppendStream"
    )
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
