"""Append throughput of the events service (batched, over gRPC) on SQLite and PostgreSQL,
and the rate at which those events reach one live subscriber per workflow.

Beside it, in the same process and on the same database, the peer: plain SQLAlchemy
inserts of the same rows in the same batches with no seq counter, no gRPC and no readers,
the floor any SQL-backed log pays.

    .venv/bin/python -m bench.suites.events_append [--workflows 8] [--batches 50] [--batch 100]
        [--batched]   (subscribers use StreamBatches instead of Stream)
        [--fenced]    (workflows created leased; every append carries the lease epoch, as a
                       run's appends do, so each is fenced on it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import BigInteger, Column, MetaData, String, Table, Text, insert

from bench.support.event_servers import events_service
from bench.support.results import add_common_arguments, save, sized
from bench.support.scratch_stores import Backend, backends
from shuttle.db import create_engine
from shuttle.envelope import type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

TENANT = tenant_metadata("bench")
PAYLOAD = json.dumps({"step": 1, "note": "x" * 80})
# --batched: subscribers use StreamBatches (several events per message) instead of Stream.
BATCHED = False
# --fenced: every append carries the workflow's lease epoch (1: created leased).
FENCED = False


def drafts(count: int) -> list[common_pb2.EventDraft]:
    kind = type_value("PROGRESS")
    return [
        common_pb2.EventDraft(type=kind, agent_id="agent", message="step", payload_json=PAYLOAD)
        for _ in range(count)
    ]


async def shuttle_run(
    stub: events_pb2_grpc.EventServiceAsyncStub, workflows: int, batches: int, batch: int
) -> tuple[float, float]:
    """Seconds until every append returned, and until every event reached its subscriber."""
    ids = []
    request = events_pb2.CreateWorkflowRequest()
    if FENCED:
        request.lease_owner, request.lease_ttl_ms = "bench", 3_600_000
    for _ in range(workflows):
        created = await stub.CreateWorkflow(request, metadata=TENANT)
        ids.append(created.workflow_id)
    ready = asyncio.Barrier(workflows + 1)

    async def subscriber(workflow_id: str) -> int:
        request = events_pb2.StreamRequest(workflow_id=workflow_id, from_seq=1)
        await ready.wait()
        seen = 0
        if BATCHED:
            async for batch in stub.StreamBatches(request, metadata=TENANT):
                seen += len(batch.events)
            return seen
        async for _event in stub.Stream(request, metadata=TENANT):
            seen += 1
        return seen

    async def producer(workflow_id: str) -> None:
        for number in range(batches):
            events = drafts(batch)
            if number == batches - 1:
                events[-1].type = type_value("WORKFLOW_COMPLETED")  # closes the stream
            await stub.Append(
                events_pb2.AppendRequest(
                    workflow_id=workflow_id,
                    events=events,
                    producer_id="bench",
                    batch_seq=number + 1,
                    lease_epoch=1 if FENCED else 0,
                ),
                metadata=TENANT,
            )

    readers = [asyncio.create_task(subscriber(workflow_id)) for workflow_id in ids]
    await ready.wait()
    started = time.perf_counter()
    await asyncio.gather(*(producer(workflow_id) for workflow_id in ids))
    appended = time.perf_counter() - started
    seen = await asyncio.gather(*readers)
    delivered = time.perf_counter() - started
    assert seen == [batches * batch + 1] * workflows, seen  # every event plus STREAM_END
    return appended, delivered


async def peer_run(url: str, workflows: int, batches: int, batch: int) -> float:
    """The same rows through bare SQLAlchemy inserts, one transaction per batch."""
    metadata = MetaData()
    table = Table(
        f"peer_{uuid.uuid4().hex[:8]}",
        metadata,
        Column("workflow_id", String(128), primary_key=True),
        Column("seq", BigInteger, primary_key=True, autoincrement=False),
        Column("type", String(40)),
        Column("payload", Text),
    )
    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)

    async def producer(workflow_id: str) -> None:
        for number in range(batches):
            rows = [
                {
                    "workflow_id": workflow_id,
                    "seq": number * batch + i + 1,
                    "type": "PROGRESS",
                    "payload": PAYLOAD,
                }
                for i in range(batch)
            ]
            async with engine.begin() as conn:
                await conn.execute(insert(table), rows)

    started = time.perf_counter()
    await asyncio.gather(*(producer(f"wf-{i}") for i in range(workflows)))
    elapsed = time.perf_counter() - started
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)
    await engine.dispose()
    return elapsed


async def bench_backend(
    backend: Backend, data_dir: Path, args: argparse.Namespace
) -> dict[str, object]:
    total = args.workflows * args.batches * args.batch
    async with events_service(backend, data_dir) as served:
        appended, delivered = await shuttle_run(
            served.stub, args.workflows, args.batches, args.batch
        )
    peer = await peer_run(backend.database_url, args.workflows, args.batches, args.batch)
    print(
        f"{backend.label:<18} {total:>8} {total / appended:>14,.0f} {total / delivered:>14,.0f}"
        f" {total / peer:>16,.0f}"
    )
    return {
        "backend": backend.label,
        "events": total,
        "appended_per_s": total / appended,
        "delivered_per_s": total / delivered,
        "peer_per_s": total / peer,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workflows", type=int, default=8)
    parser.add_argument("--batches", type=int, help="batches per workflow (50; quick 10)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batched", action="store_true", help="subscribe with StreamBatches")
    parser.add_argument(
        "--fenced", action="store_true", help="appends carry the lease epoch (fenced)"
    )
    add_common_arguments(parser)
    args = parser.parse_args()
    args.batches = sized(args.batches, args.quick, full=50, small=10)
    global BATCHED, FENCED
    BATCHED, FENCED = args.batched, args.fenced
    print(
        f"{args.workflows} workflows x {args.batches} batches x {args.batch} events, "
        "one producer and one live subscriber per workflow, events/s:"
    )
    header = f"{'backend':<18} {'events':>8} {'appended/s':>14} {'delivered/s':>14}"
    print(f"{header} {'peer inserts/s':>16}")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        async with backends(Path(scratch), with_redis=False) as found:
            for backend in found:
                rows.append(await bench_backend(backend, Path(scratch), args))
        async with backends(Path(scratch) / "r", with_redis=True) as found:
            for backend in found[1:]:
                rows.append(await bench_backend(backend, Path(scratch) / "r", args))
    settings = {
        "workflows": args.workflows,
        "batches": args.batches,
        "batch": args.batch,
        "fenced": args.fenced,
    }
    save(args.json, "events_append", settings, {"rows": rows})


if __name__ == "__main__":
    asyncio.run(main())
