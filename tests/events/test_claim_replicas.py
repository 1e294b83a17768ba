"""Two events-service processes on one PostgreSQL, many executors claiming the same lapsed
runs through both at once: each run is taken over exactly once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.support.databases import PG_HOST, PG_PORT, PG_USER, admin_sql
from tests.support.events_process import EventsProcess, events_replicas

pytestmark = pytest.mark.integration

TENANT = "t1"
RUNS = 40
CLAIMERS_PER_REPLICA = 6


@pytest.fixture
def database_of_its_own(postgres_url: str) -> Iterator[str]:
    """A database no other test's runs are in: a claim takes whatever has lapsed."""
    name = f"shuttle_claims_{uuid.uuid4().hex[:12]}"
    admin_sql(f'CREATE DATABASE "{name}"')
    yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def replicas(
    database_of_its_own: str, redis_server: str, redis_prefix: str, tmp_path: Path
) -> Iterator[list[EventsProcess]]:
    with events_replicas(database_of_its_own, redis_server, redis_prefix, tmp_path) as started:
        yield started


async def test_runs_claimed_through_two_replicas_at_once_are_each_taken_once(
    replicas: list[EventsProcess],
) -> None:
    channels = [grpc.aio.insecure_channel(replica.target) for replica in replicas]
    stubs = [events_pb2_grpc.EventServiceStub(channel) for channel in channels]
    try:
        workflow_ids = []
        for n in range(RUNS):
            created = await stubs[n % 2].CreateWorkflow(
                events_pb2.CreateWorkflowRequest(
                    spec_json=json.dumps({"n": n}), lease_owner="exec-dead", lease_ttl_ms=1
                ),
                metadata=tenant_metadata(TENANT),
            )
            workflow_ids.append(created.workflow_id)

        async def claimer(stub: events_pb2_grpc.EventServiceAsyncStub, owner: str) -> list[str]:
            got: list[str] = []
            while True:
                answer = await stub.ClaimRuns(
                    events_pb2.ClaimRunsRequest(owner=owner, ttl_ms=600_000, limit=4)
                )
                if not answer.workflows:
                    return got
                for workflow in answer.workflows:
                    assert (workflow.lease_owner, workflow.lease_epoch) == (owner, 2)
                    assert workflow.takeovers == 1
                got += [workflow.workflow_id for workflow in answer.workflows]

        owners = [f"exec-{r}{n}" for r in range(2) for n in range(CLAIMERS_PER_REPLICA)]
        claims = await asyncio.gather(
            *(claimer(stubs[index // CLAIMERS_PER_REPLICA], o) for index, o in enumerate(owners))
        )
        # A claimer that lost every candidate of its last read stops early: what is left, if
        # anything, goes to one last claim.
        claims.append(await claimer(stubs[0], "exec-last"))
        everything = [workflow_id for got in claims for workflow_id in got]
        assert sorted(everything) == sorted(workflow_ids)
        for owner, got in zip([*owners, "exec-last"], claims, strict=True):
            for workflow_id in got:
                workflow = await stubs[1].GetWorkflow(
                    events_pb2.GetWorkflowRequest(workflow_id=workflow_id),
                    metadata=tenant_metadata(TENANT),
                )
                assert (workflow.lease_owner, workflow.lease_epoch) == (owner, 2)
    finally:
        for channel in channels:
            await channel.close()
