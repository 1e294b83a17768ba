"""Idle SSE connections held by one gateway process, what each costs, and one event to all.

The five Shuttle processes run on the embedded defaults. This process lifts its open-file
limit (the services inherit it) and opens N SSE streams on one workflow with raw sockets,
in steps, reading the gateway's and the events service's resident memory and open sockets
after each step. With all N open and idle it reads both processes' CPU over a few seconds,
then appends one event and times its arrival at every client.

    .venv/bin/python -m bench.suites.sse_idle [--connections 5000] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from bench.support.event_servers import free_port
from bench.support.meters import CpuMeter, open_sockets, rss_bytes
from bench.support.producer import Producer
from bench.support.results import add_common_arguments, save, sized
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
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.support.stack import Stack

from .sse_fanout import METADATA, PROGRESS, TENANT, Fanout

IDLE_WINDOW_SECONDS = 5.0
STEPS = 5


def footprint(pids: dict[str, int]) -> dict[str, dict[str, int]]:
    return {
        name: {"rss": rss_bytes(pid), "sockets": open_sockets(pid)} for name, pid in pids.items()
    }


async def idle_cpu(pids: dict[str, int]) -> dict[str, float]:
    """Each process's CPU share (1.0 = one core) over an idle window."""
    meter = CpuMeter(pids)
    await asyncio.sleep(IDLE_WINDOW_SECONDS)  # a measuring window, not a wait for a condition
    return meter.shares()


async def grpc_streams_alone(stack: Stack, workflow_id: str, count: int) -> float:
    """Bytes per idle EventService.Stream call in a bare grpc.aio client process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.peers.grpc_stream_holder",
        *("--target", stack.target("events"), "--workflow", workflow_id),
        *("--token-file", str(stack.supervisor.token_file)),
        *("--tenant", TENANT, "--count", str(count)),
        stdout=asyncio.subprocess.PIPE,
    )
    output, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"grpc_stream_holder exited with {process.returncode}")
    per_stream: float = json.loads(output.decode().strip().splitlines()[-1])["per_stream_bytes"]
    return per_stream


async def bare_sse_per_connection(count: int) -> float:
    """Bytes per idle stream in a bare sse-starlette server (bench.peers.sse_server)."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.peers.sse_server", "--port", str(port)
    )
    try:
        # One stream first, so imports and buffers every stream shares are in the baseline.
        clients = await connect_when_listening(port, 1)
        before = rss_bytes(server.pid)
        clients += await open_clients("127.0.0.1", port, "/sse", count, [])
        await asyncio.sleep(IDLE_WINDOW_SECONDS)  # a window for the tasks to settle
        after = rss_bytes(server.pid)
        close_all(clients)
    finally:
        server.terminate()
        await server.wait()
    return (after - before) / count


async def connect_when_listening(port: int, count: int) -> list[SseClient]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return await open_clients("127.0.0.1", port, "/sse", count, [])
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def main(args: argparse.Namespace) -> None:
    limit = raise_open_files_limit()
    total = sized(args.connections, args.quick, full=5000, small=500)
    if total + 200 > limit:
        raise SystemExit(f"{total} connections need more than the open-file limit ({limit})")
    steps: list[dict[str, Any]] = []
    with running_stack(STACK_ENV) as stack:
        processes = stack.supervisor.processes
        pids = {"gateway": processes["gateway"].pid, "events": processes["events"].pid}
        channel = stack.channel("events")
        stub = events_pb2_grpc.EventServiceStub(channel)
        producer = Producer(stub)
        fanout = Fanout(stub, stack.gateway, producer)
        try:
            latencies: list[float] = []
            created = await fanout.events.CreateWorkflow(
                events_pb2.CreateWorkflowRequest(tenant_id=TENANT), metadata=METADATA
            )
            workflow_id = created.workflow_id
            path = f"/api/v1/stream/sse?workflow_id={workflow_id}"
            clients: list[SseClient] = []
            steps.append({"connections": 0, **footprint(pids)})
            opened_at = time.perf_counter()
            for step in range(1, STEPS + 1):
                count = total * step // STEPS - len(clients)
                clients += await open_clients(fanout.host, fanout.port, path, count, latencies)
                steps.append({"connections": len(clients), **footprint(pids)})
                gateway_mb = steps[-1]["gateway"]["rss"] / 2**20
                events_mb = steps[-1]["events"]["rss"] / 2**20
                opened = len(clients)
                print(f"{opened:>6} open: gateway {gateway_mb:.1f} MB, events {events_mb:.1f} MB")
            opening_s = time.perf_counter() - opened_at
            cpu = await idle_cpu(pids)
            settled = footprint(pids)
            bare_grpc = await grpc_streams_alone(stack, workflow_id, total)
            started = time.perf_counter()
            draft = common_pb2.EventDraft(type=PROGRESS, payload_json=stamp())
            await fanout.append(workflow_id, [draft])
            await wait_until(lambda: all(c.frames for c in clients), 300, "the event everywhere")
            reached_all_s = time.perf_counter() - started
            reached = sum(1 for c in clients if c.frames)
            await fanout.finish(workflow_id, clients)
        finally:
            await producer.close()
            await channel.close()
    bare_sse = await bare_sse_per_connection(total)
    first = steps[0]
    figures: dict[str, Any] = {
        "connections": total,
        "opening_s": opening_s,
        "steps": steps,
        "settled": settled,
        "idle_cpu": cpu,
        "per_connection_bytes": {
            name: (settled[name]["rss"] - first[name]["rss"]) / total for name in pids
        },
        "bare_grpc_stream_bytes": bare_grpc,
        "bare_sse_stream_bytes": bare_sse,
        "sockets_added": {name: settled[name]["sockets"] - first[name]["sockets"] for name in pids},
        "event_latency_ms": latency_summary(latencies),
        "event_reached": reached,
        "event_reached_all_s": reached_all_s,
    }
    for name in pids:
        print(
            f"{name:<8} {figures['per_connection_bytes'][name] / 1024:6.1f} KB per connection, "
            f"+{figures['sockets_added'][name]} sockets, idle CPU {cpu[name] * 100:5.1f} %"
        )
    print(f"a bare grpc.aio client: {bare_grpc / 1024:.1f} KB per idle Stream call")
    print(f"a bare sse-starlette server: {bare_sse / 1024:.1f} KB per idle stream")
    q = figures["event_latency_ms"]
    print(
        f"one event after: reached {reached}/{total} clients, p50 {q['p50']:.1f} ms, "
        f"p99 {q['p99']:.1f} ms, last {q['max']:.1f} ms"
    )
    save(args.json, "sse_idle", {"connections": total, "tenant": TENANT}, figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, help="idle SSE streams (5000; quick 500)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
