"""Task routes: submit (idempotently), list, inspect, page through history."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import grpc
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from gateway.edge.tenancy import CallerDep
from gateway.errors import ApiError
from gateway.routes.common import ERRORS, Clients, Index, Sessions, parse_types, workflow_of
from gateway.submit import TaskSpec, submit
from gateway.workflow_status import status_name
from shuttle.envelope import to_json_dict
from shuttle.v1 import events_pb2

router = APIRouter(prefix="/api/v1", tags=["tasks"])


class TaskCreate(BaseModel):
    query: str = Field(min_length=1, max_length=100_000)
    session_id: str | None = Field(None, max_length=128)
    mode: Literal["simple", "standard", "complex", "SIMPLE", "STANDARD", "COMPLEX"] | None = None
    model: str | None = Field(None, max_length=200)
    budget_tokens: int | None = Field(None, ge=1, le=2**63 - 1)
    context: dict[str, Any] | None = None

    def spec(self, max_budget_tokens: int) -> TaskSpec:
        """The task this body asks for, with the checks its schema cannot make; the task API
        and grpc-web's StartRun both start runs from it."""
        if not self.query.strip():
            raise ApiError(400, "invalid_request", "query: must not be blank")
        if self.budget_tokens is not None and self.budget_tokens > max_budget_tokens:
            raise ApiError(
                400,
                "budget_too_large",
                f"budget_tokens is {self.budget_tokens}; at most {max_budget_tokens} are "
                f"allowed (SHUTTLE_MAX_BUDGET_TOKENS={max_budget_tokens})",
            )
        return TaskSpec(
            query=self.query,
            session_id=self.session_id or "",
            mode=self.mode or "",
            model=self.model or "",
            budget_tokens=self.budget_tokens or 0,
            context=self.context or {},
        )


class TaskCreated(BaseModel):
    workflow_id: str
    task_id: str
    status: str
    stream_url: str
    session_id: str


@router.post(
    "/tasks",
    status_code=201,
    response_model=TaskCreated,
    responses={
        **ERRORS,
        400: {"description": "invalid request, or budget_tokens over SHUTTLE_MAX_BUDGET_TOKENS"},
        409: {"description": "Idempotency-Key still in flight"},
        422: {"description": "Idempotency-Key reused with another body"},
        429: {
            "description": "rate limited, or the tenant has SHUTTLE_TENANT_MAX_RUNS runs "
            "going (see Retry-After)"
        },
    },
)
async def create_task(
    body: TaskCreate,
    caller: CallerDep,
    clients: Clients,
    index: Index,
    sessions: Sessions,
    request: Request,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)
    ] = None,
) -> JSONResponse:
    """Start a task; the same Idempotency-Key (per tenant) always yields the same workflow."""
    spec = body.spec(request.app.state.settings.max_budget_tokens)
    done = await submit(
        clients, index, sessions, caller.tenant_id, caller.key_id, spec, idempotency_key
    )
    status = done.status
    if done.replayed:
        status = (await workflow_of(clients, caller.tenant_id, done.workflow_id)).status
    created = TaskCreated(
        workflow_id=done.workflow_id,
        task_id=done.workflow_id,
        status=status_name(status),
        stream_url=f"/api/v1/stream/sse?workflow_id={done.workflow_id}",
        session_id=done.session_id,
    )
    headers = {"Location": f"/api/v1/tasks/{done.workflow_id}"}
    if done.replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(created.model_dump(), status_code=201, headers=headers)


@router.get("/tasks", responses=ERRORS)
async def list_tasks(
    caller: CallerDep,
    clients: Clients,
    index: Index,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    """The caller's most recent tasks, newest first."""
    entries = await index.recent(caller.tenant_id, limit)

    async def describe(entry_id: str) -> events_pb2.Workflow | None:
        try:
            return await workflow_of(clients, caller.tenant_id, entry_id)
        except grpc.aio.AioRpcError:
            return None

    found = await asyncio.gather(*(describe(e.workflow_id) for e in entries))
    return {
        "tasks": [
            {
                "workflow_id": entry.workflow_id,
                "query": entry.query,
                "created_at": entry.created_at.isoformat(),
                "status": status_name(wf.status) if wf else "unknown",
                "result": wf.result if wf else "",
            }
            for entry, wf in zip(entries, found, strict=True)
        ]
    }


@router.get("/tasks/{workflow_id}", responses=ERRORS)
async def get_task(workflow_id: str, caller: CallerDep, clients: Clients) -> dict[str, Any]:
    """Status, result, usage, cost and timings of one task."""
    # From the events service's registry, not the executor: a task whose executor died must
    # still show that it failed.
    run = await workflow_of(clients, caller.tenant_id, workflow_id)
    return {
        "workflow_id": run.workflow_id,
        "task_id": run.workflow_id,
        "status": status_name(run.status),
        "query": run.query,
        "result": run.result,
        "error": run.error,
        "usage": {
            "input_tokens": run.usage.input_tokens,
            "output_tokens": run.usage.output_tokens,
            "total_tokens": run.usage.total_tokens,
        },
        "cost_usd": run.usage.cost_usd,
        "created_at": run.created_at.ToJsonString() if run.HasField("created_at") else None,
        "updated_at": run.updated_at.ToJsonString() if run.HasField("updated_at") else None,
        "duration_ms": run.duration_ms,
        "last_seq": run.last_seq,
        "session_id": run.session_id,
    }


@router.get("/tasks/{workflow_id}/events", responses=ERRORS)
async def list_events(
    workflow_id: str,
    caller: CallerDep,
    clients: Clients,
    from_seq: Annotated[int, Query(ge=0, le=2**63 - 1)] = 1,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    types: str | None = None,
    full_results: bool = False,
) -> dict[str, Any]:
    """One page of the workflow's log."""
    tenant = caller.tenant_id
    page = await clients.events.list_events(
        workflow_id,
        tenant,
        from_seq=from_seq,
        limit=limit,
        types=parse_types(types),
        full_results=full_results,
    )
    return {
        "workflow_id": workflow_id,
        "events": [to_json_dict(e) for e in page.events],
        "next_seq": page.next_seq or None,
    }
