"""A tenant's concurrent runs and a run's budget, bounded through the real stack: past either
bound the gateway answers at once naming the setting, and goes on serving."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from shuttle.grpc_client import tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc, executor_pb2, executor_pb2_grpc
from tests.events.helpers import draft
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.integration

TENANT = "default"  # every caller's tenant while auth is off
MAX_RUNS = 1
MAX_BUDGET = 5_000


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = start_stack(
        Path(tmp_path_factory.mktemp("tenant-limits")),
        extra_env={
            "SHUTTLE_TENANT_MAX_RUNS": str(MAX_RUNS),
            "SHUTTLE_MAX_BUDGET_TOKENS": str(MAX_BUDGET),
        },
    )
    yield stack
    stack.stop()


@pytest.fixture
async def events(limited: Stack) -> AsyncIterator[events_pb2_grpc.EventServiceAsyncStub]:
    async with limited.channel("events") as channel:
        yield events_pb2_grpc.EventServiceStub(channel)


async def run_to_end(client: httpx.AsyncClient, workflow_id: str) -> None:
    async with client.stream("GET", f"/api/v1/stream/sse?workflow_id={workflow_id}") as sse:
        assert sse.status_code == 200
        async for _ in sse.aiter_lines():
            pass


@pytest.mark.skipif(
    "tenant_max_runs" not in Settings.model_fields,
    reason="the events service does not bound a tenant's runs (SHUTTLE_TENANT_MAX_RUNS) here yet",
)
async def test_a_tenant_at_its_run_limit_gets_429_and_its_idempotency_key_back(
    limited: Stack, events: events_pb2_grpc.EventServiceAsyncStub
) -> None:
    # A workflow that has not ended holds the tenant's only run.
    holding = await events.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata(TENANT)
    )
    key = f"limit-{uuid.uuid4()}"
    body = {"query": "What is 2*2?"}
    async with httpx.AsyncClient(base_url=limited.gateway, timeout=60) as client:
        refused = await client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": key})
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "tenant_run_limit"
        assert f"SHUTTLE_TENANT_MAX_RUNS={MAX_RUNS}" in error["message"]
        assert refused.headers["Retry-After"].isdigit()
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "shuttle-auto", "messages": [{"role": "user", "content": "2*2?"}]},
        )
        assert chat.status_code == 429 and chat.json()["error"]["code"] == "tenant_run_limit"

        # The run that held the slot ends; the same key now starts the task.
        await events.Append(
            events_pb2.AppendRequest(
                workflow_id=holding.workflow_id, events=[draft("WORKFLOW_COMPLETED")]
            ),
            metadata=tenant_metadata(TENANT),
        )
        retried = await client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": key})
        assert retried.status_code == 201, retried.text
        assert "idempotent-replayed" not in retried.headers
        await run_to_end(client, retried.json()["workflow_id"])
        task = (await client.get(f"/api/v1/tasks/{retried.json()['workflow_id']}")).json()
        assert task["result"] == "[demo model] 2*2 = 4"


async def test_a_budget_over_the_ceiling_is_refused_by_the_gateway_and_the_executor(
    limited: Stack,
) -> None:
    async with httpx.AsyncClient(base_url=limited.gateway, timeout=60) as client:
        over = await client.post(
            "/api/v1/tasks", json={"query": "What is 3*3?", "budget_tokens": MAX_BUDGET + 1}
        )
        assert over.status_code == 400, over.text
        assert over.json()["error"] == {
            "code": "budget_too_large",
            "message": f"budget_tokens is {MAX_BUDGET + 1}; at most {MAX_BUDGET} are allowed "
            f"(SHUTTLE_MAX_BUDGET_TOKENS={MAX_BUDGET})",
        }
        huge = await client.post(
            "/api/v1/tasks", json={"query": "What is 3*3?", "budget_tokens": 2**63 - 1}
        )
        assert huge.status_code == 400
        assert huge.json()["error"]["code"] == "budget_too_large"
        assert "tasks" in (await client.get("/api/v1/tasks")).json()

        # A gRPC caller meets the same ceiling at the executor.
        async with limited.channel("executor") as channel:
            executor = executor_pb2_grpc.ExecutorServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await executor.StartRun(
                    executor_pb2.StartRunRequest(
                        query="What is 3*3?", tenant_id=TENANT, budget_tokens=MAX_BUDGET + 1
                    ),
                    metadata=tenant_metadata(TENANT),
                )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"(SHUTTLE_MAX_BUDGET_TOKENS={MAX_BUDGET})" in str(refused.value.details())

        # The ceiling itself is an ordinary budget.
        at_ceiling = await client.post(
            "/api/v1/tasks", json={"query": "What is 3*3?", "budget_tokens": MAX_BUDGET}
        )
        assert at_ceiling.status_code == 201, at_ceiling.text
        await run_to_end(client, at_ceiling.json()["workflow_id"])
