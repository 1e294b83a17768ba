"""What every route family shares: its request dependencies (the backends, the SSE fan-out,
the task index, the session store), the errors each route documents, the check that a
workflow is the caller's before anything touches it, and the event-type filter a query
names."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from gateway.backends import Backends
from gateway.errors import ApiError
from gateway.fanout import FanOut
from gateway.stores.sessions import SessionStore
from gateway.stores.task_index import TaskIndex
from shuttle.envelope import type_name, type_value
from shuttle.v1 import events_pb2

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text}
    for code, text in {
        400: "invalid request",
        401: "authentication required",
        404: "no such workflow for this tenant",
        413: "request body over SHUTTLE_GATEWAY_MAX_BODY_BYTES",
        429: "rate limited (see Retry-After)",
    }.items()
}


# Coroutines, though they only read app.state: FastAPI runs a plain function dependency
# in its thread pool, a thread hop each on every request.
async def backends_of(request: Request) -> Backends:
    backends: Backends = request.app.state.backends
    return backends


async def fanout_of(request: Request) -> FanOut:
    fanout: FanOut = request.app.state.fanout
    return fanout


async def task_index_of(request: Request) -> TaskIndex:
    index: TaskIndex = request.app.state.task_index
    return index


async def sessions_of(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.sessions
    return store


Clients = Annotated[Backends, Depends(backends_of)]
Fanout = Annotated[FanOut, Depends(fanout_of)]
Index = Annotated[TaskIndex, Depends(task_index_of)]
Sessions = Annotated[SessionStore, Depends(sessions_of)]


async def workflow_of(clients: Backends, tenant: str, workflow_id: str) -> events_pb2.Workflow:
    """The workflow's record in the events service; NOT_FOUND (404) unless it is `tenant`'s."""
    return await clients.events.get_workflow(workflow_id, tenant)


async def require_workflow(clients: Backends, tenant: str, workflow_id: str) -> None:
    """404 unless `workflow_id` is this tenant's, before any command touches it."""
    await workflow_of(clients, tenant, workflow_id)


def parse_types(raw: str | None) -> list[str]:
    """The bare names of a `types` query (`TOOL_INVOKED,TOOL_OBSERVATION`); 400 for one
    that is no event type."""
    if not raw:
        return []
    try:
        return [type_name(type_value(name)) for name in raw.split(",") if name.strip()]
    except ValueError as exc:
        raise ApiError(400, "invalid_argument", str(exc)) from None
