"""Calls spread over the replicas a client target names, and ride out one of them dying.

Two real events processes share one PostgreSQL database and one Redis; each counts the
calls it served on its own metrics port.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from shuttle.events_client import EventsClient
from shuttle.grpc_client import open_channel, tenant_metadata
from shuttle.grpc_targets import client_target
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.support.events_process import EventsProcess, events_replicas

pytestmark = pytest.mark.integration

TENANT = "t1"
GET_WORKFLOW = "/shuttle.v1.EventService/GetWorkflow"


@pytest.fixture
def replicas(
    postgres_url: str, redis_server: str, redis_prefix: str, tmp_path: Path
) -> Iterator[list[EventsProcess]]:
    with events_replicas(postgres_url, redis_server, redis_prefix, tmp_path) as started:
        yield started


async def create_workflow(stub: events_pb2_grpc.EventServiceAsyncStub) -> str:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id=TENANT, query="q"),
        metadata=tenant_metadata(TENANT),
        timeout=30,
    )
    return str(created.workflow_id)


async def get_workflow(stub: events_pb2_grpc.EventServiceAsyncStub, workflow_id: str) -> None:
    await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT),
        metadata=tenant_metadata(TENANT),
        timeout=30,
    )


async def test_a_list_target_spreads_calls_over_every_replica(
    replicas: list[EventsProcess],
) -> None:
    target = client_target(",".join(replica.target for replica in replicas))
    assert target.startswith("ipv4:")
    before = [replica.finished_calls(GET_WORKFLOW) for replica in replicas]
    async with open_channel(target) as channel:
        stub = events_pb2_grpc.EventServiceStub(channel)
        workflow_id = await create_workflow(stub)
        await channel.channel_ready()
        for _ in range(40):
            await get_workflow(stub, workflow_id)
    served = [
        replica.finished_calls(GET_WORKFLOW, "OK") - count
        for replica, count in zip(replicas, before, strict=True)
    ]
    assert sum(served) == 40
    # round_robin takes the replicas in turn once both are connected.
    assert min(served) >= 15, served


async def test_calls_go_on_succeeding_when_one_replica_is_killed(
    replicas: list[EventsProcess],
) -> None:
    target = client_target(",".join(replica.target for replica in replicas))
    async with open_channel(target) as channel:
        stub = events_pb2_grpc.EventServiceStub(channel)
        workflow_id = await create_workflow(stub)
        await channel.channel_ready()
        for _ in range(4):
            await get_workflow(stub, workflow_id)  # both replicas connected and serving
        # Frozen, the replica takes its share of the calls and answers none; killed, it
        # breaks them (UNAVAILABLE), and gRPC makes each again on the other replica.
        os.kill(replicas[0].pid, signal.SIGSTOP)
        calls = [asyncio.create_task(get_workflow(stub, workflow_id)) for _ in range(20)]
        await asyncio.sleep(1.0)
        assert not all(call.done() for call in calls), "the frozen replica holds some calls"
        replicas[0].kill()
        await asyncio.gather(*calls)  # every call answered, none failed
        for _ in range(10):
            await get_workflow(stub, workflow_id)
    assert replicas[1].finished_calls(GET_WORKFLOW, "OK") >= 20


async def test_a_dns_target_of_localhost_reaches_the_service(
    replicas: list[EventsProcess],
) -> None:
    # localhost may resolve to ::1 too, where nothing listens: round_robin skips it.
    async with open_channel(client_target(f"dns:///localhost:{replicas[0].port}")) as channel:
        stub = events_pb2_grpc.EventServiceStub(channel)
        workflow_id = await create_workflow(stub)
        for _ in range(5):
            await get_workflow(stub, workflow_id)


async def test_a_process_ends_connections_at_the_configured_age(tmp_path: Path) -> None:
    process = EventsProcess(
        tmp_path,
        {
            "SHUTTLE_GRPC_MAX_CONNECTION_AGE_SECONDS": "1",
            "SHUTTLE_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS": "0.5",
        },
    ).start()
    try:
        async with open_channel(process.target) as channel:
            client = EventsClient(channel)
            workflow_id = await client.create_workflow(TENANT, query="q")
            following = client.follow(workflow_id, TENANT)
            reading = asyncio.create_task(anext(following))  # the log stays empty: it waits
            deadline = asyncio.get_running_loop().time() + 20
            while process.finished_streams() < 2:  # each connection's stream ended, reopened
                assert asyncio.get_running_loop().time() < deadline, "connections never end"
                await asyncio.sleep(0.1)
            assert not reading.done()
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
    finally:
        process.stop()
