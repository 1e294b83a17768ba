"""Task routes: submit, inspect, page through history."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from gateway.backends import Backends
from gateway.errors import ApiError
from gateway.tenancy import tenant_of
from shuttle.envelope import to_json_dict, type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, executor_pb2

router = APIRouter(prefix="/api/v1")

_MODES = {
    "simple": common_pb2.MODE_SIMPLE,
    "standard": common_pb2.MODE_STANDARD,
    "complex": common_pb2.MODE_COMPLEX,
}


class TaskCreate(BaseModel):
    query: str = Field(min_length=1, max_length=100_000)
    session_id: str | None = Field(None, max_length=128)
    mode: Literal["simple", "standard", "complex", "SIMPLE", "STANDARD", "COMPLEX"] | None = None
    model: str | None = Field(None, max_length=200)
    budget_tokens: int | None = Field(None, ge=1)
    context: dict[str, Any] | None = None


class TaskCreated(BaseModel):
    workflow_id: str
    task_id: str
    status: str
    stream_url: str


def backends_of(request: Request) -> Backends:
    backends: Backends = request.app.state.backends
    return backends


Tenant = Annotated[str, Depends(tenant_of)]
Clients = Annotated[Backends, Depends(backends_of)]


def status_name(value: int) -> str:
    return common_pb2.WorkflowStatus.Name(value).removeprefix("WORKFLOW_STATUS_").lower()  # type: ignore[arg-type]


def parse_types(raw: str | None) -> list[common_pb2.EventType.ValueType]:
    if not raw:
        return []
    try:
        return [type_value(name) for name in raw.split(",") if name.strip()]
    except ValueError as exc:
        raise ApiError(400, "invalid_argument", str(exc)) from None


@router.post("/tasks", status_code=201, response_model=TaskCreated)
async def create_task(body: TaskCreate, tenant: Tenant, clients: Clients) -> JSONResponse:
    if not body.query.strip():
        raise ApiError(400, "invalid_request", "query: must not be blank")
    request = executor_pb2.StartRunRequest(
        query=body.query,
        tenant_id=tenant,
        session_id=body.session_id or "",
        mode=_MODES[body.mode.lower()] if body.mode else common_pb2.MODE_UNSPECIFIED,
        model=body.model or "",
        budget_tokens=body.budget_tokens or 0,
        context_json=json.dumps(body.context) if body.context else "",
    )
    started = await clients.executor.StartRun(request, metadata=tenant_metadata(tenant))
    workflow_id = started.workflow_id
    created = TaskCreated(
        workflow_id=workflow_id,
        task_id=workflow_id,
        status=status_name(started.status),
        stream_url=f"/api/v1/stream/sse?workflow_id={workflow_id}",
    )
    return JSONResponse(
        created.model_dump(), status_code=201, headers={"Location": f"/api/v1/tasks/{workflow_id}"}
    )


@router.get("/tasks/{workflow_id}")
async def get_task(workflow_id: str, tenant: Tenant, clients: Clients) -> dict[str, Any]:
    run = await clients.executor.GetRun(
        executor_pb2.GetRunRequest(workflow_id=workflow_id, tenant_id=tenant),
        metadata=tenant_metadata(tenant),
    )
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


@router.get("/tasks/{workflow_id}/events")
async def list_events(
    workflow_id: str,
    tenant: Tenant,
    clients: Clients,
    from_seq: Annotated[int, Query(ge=0)] = 1,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    types: str | None = None,
    full_results: bool = False,
) -> dict[str, Any]:
    page = await clients.events.List(
        events_pb2.ListRequest(
            workflow_id=workflow_id,
            tenant_id=tenant,
            from_seq=from_seq,
            limit=limit,
            types=parse_types(types),
            full_results=full_results,
        ),
        metadata=tenant_metadata(tenant),
    )
    return {
        "workflow_id": workflow_id,
        "events": [to_json_dict(e) for e in page.events],
        "next_seq": page.next_seq or None,
    }
