"""A subset of OpenAI's Responses API over Shuttle's runs: `POST /v1/responses` (waiting,
`background: true`, or `stream: true`), `GET /v1/responses/{id}` (the object, or with
`stream=true&starting_after=N` the stream rejoined after event N), and
`POST /v1/responses/{id}/cancel`.

`input` is a string or a list of messages: the last user message is the task, earlier ones
open a new session, and `previous_response_id` continues that response's session instead.
`instructions` reach the run as its context. What Shuttle does not do is refused by name:
client-side `tools`, sampling parameters (the models file sets them), `metadata` (not kept).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.backends import Backends, tenant_metadata
from gateway.edge.tenancy import Caller, CallerDep
from gateway.errors import ApiError
from gateway.fanout import FanOut
from gateway.openai.refusals import OWN_TOOLS, SAMPLING, refuse_unsupported
from gateway.openai.responses import (
    STATUS,
    TERMINAL,
    ResponseEvents,
    ResponseShape,
    usage_of,
    workflow_of_response,
)
from gateway.routes.common import Clients, Fanout, Index, Sessions, workflow_of
from gateway.routes.openai_compat import AUTO_MODEL, OPENAI_ERRORS, require_model
from gateway.submit import TaskSpec, submit
from gateway.workflow_status import status_name
from shuttle.envelope import type_name
from shuttle.settings import Settings
from shuttle.utf8 import ensure_utf8, json_text
from shuttle.v1 import events_pb2, executor_pb2

router = APIRouter(prefix="/v1", tags=["openai"])

REFUSED = {
    "tools": OWN_TOOLS,
    "tool_choice": "Shuttle's agent chooses among its own tools",
    "temperature": SAMPLING,
    "top_p": SAMPLING,
    "max_output_tokens": "output caps are set per model in Shuttle's models file",
    "reasoning": "reasoning settings are set per model in Shuttle's models file",
    "metadata": "Shuttle does not keep response metadata; use the task API's session instead",
    "conversation": "use previous_response_id to continue a response's session",
    "prompt": "prompt templates are not supported; send input",
}


class ResponseRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=200)
    input: str | list[dict[str, Any]]
    instructions: str | None = Field(None, max_length=100_000)
    background: bool = False
    stream: bool = False
    previous_response_id: str | None = Field(None, max_length=200)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return ensure_utf8(content)
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        kinds = ("input_text", "output_text", "text")
        return ensure_utf8("".join(str(p.get("text", "")) for p in parts if p.get("type") in kinds))
    return ""


async def task_of(
    body: ResponseRequest,
    settings: Settings,
    caller: Caller,
    backends: Backends,
    sessions: Sessions,
) -> TaskSpec:
    refuse_unsupported(body.model_extra or {}, REFUSED)
    require_model(body.model, settings)
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    said = [(str(i.get("role", "")), _text(i.get("content")).strip()) for i in items]
    said = [(role, text) for role, text in said if role in ("user", "assistant") and text]
    if not said or said[-1][0] != "user":
        raise ApiError(
            400, "invalid_request", "input: the last message must be a user's, with text"
        )
    session_id = ""
    if body.previous_response_id:
        previous = workflow_of_response(body.previous_response_id)
        record = await workflow_of(backends, caller.tenant_id, previous or "")
        session_id = record.session_id
    return TaskSpec(
        query=said[-1][1],
        session_id=session_id,
        model="" if body.model == AUTO_MODEL else body.model,
        context={"instructions": body.instructions} if body.instructions else {},
        earlier=() if session_id else tuple(said[:-1]),
    )


def shape_of(record: events_pb2.Workflow, background: bool = False) -> ResponseShape:
    """A response's own fields, as its run's request recorded them."""
    spec: dict[str, Any] = json.loads(record.spec_json) if record.spec_json else {}
    context = spec.get("context") if isinstance(spec.get("context"), dict) else {}
    instructions = context.get("instructions") if context else None
    return ResponseShape(
        workflow_id=record.workflow_id,
        model=str(spec.get("model") or AUTO_MODEL),
        created_at=record.created_at.seconds,
        instructions=instructions if isinstance(instructions, str) else None,
        background=background,
    )


def object_of(record: events_pb2.Workflow, shape: ResponseShape) -> dict[str, Any]:
    status = STATUS.get(status_name(record.status), "in_progress")
    usage = None
    if status in TERMINAL:
        u = record.usage
        usage = usage_of(u.input_tokens, u.output_tokens, u.total_tokens)
    error = {"code": "server_error", "message": record.error} if status == "failed" else None
    answer = record.result if status == "completed" else ""
    return shape.object(status, answer, usage, error)


async def _record(backends: Backends, caller: Caller, response: str) -> events_pb2.Workflow:
    workflow_id = workflow_of_response(response)
    if workflow_id is None:
        raise ApiError(404, "not_found", f"response {response!r} not found")
    return await workflow_of(backends, caller.tenant_id, workflow_id)


async def _events(
    fanout: FanOut, tenant: str, shape: ResponseShape, after: int
) -> AsyncIterator[ServerSentEvent]:
    """The response's stream from the log's start, sending what comes after `after`."""
    events = ResponseEvents(shape)
    chunks = fanout.watch(tenant, shape.workflow_id, 1)
    try:
        async for chunk in chunks:
            for item in chunk.items:
                payload = json.loads(item.event.payload_json or "{}")
                for event in events.translate(type_name(item.event.type), payload):
                    if event["sequence_number"] > after:
                        yield ServerSentEvent(data=json_text(event), event=event["type"])
    finally:
        await chunks.aclose()


async def _until_ended(fanout: FanOut, tenant: str, workflow_id: str) -> None:
    chunks = fanout.watch(tenant, workflow_id, 1)
    try:
        async for _ in chunks:
            pass
    finally:
        await chunks.aclose()


def _stream(events: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    return EventSourceResponse(events, ping=15, headers={"Cache-Control": "no-cache"})


@router.post("/responses", responses=OPENAI_ERRORS)
async def create_response(
    body: ResponseRequest,
    caller: CallerDep,
    clients: Clients,
    index: Index,
    sessions: Sessions,
    fanout: Fanout,
    request: Request,
) -> Any:
    """Run the input as a task: answer when it ends, at once (`background`), or streamed."""
    settings: Settings = request.app.state.settings
    spec = await task_of(body, settings, caller, clients, sessions)
    started = await submit(clients, index, sessions, caller.tenant_id, caller.key_id, spec)
    shape = ResponseShape(
        started.workflow_id, body.model, instructions=body.instructions, background=body.background
    )
    if body.stream:
        return _stream(_events(fanout, caller.tenant_id, shape, after=-1))
    if not body.background:
        await _until_ended(fanout, caller.tenant_id, started.workflow_id)
    record = await workflow_of(clients, caller.tenant_id, started.workflow_id)
    return object_of(record, shape)


@router.get("/responses/{response_id}", responses=OPENAI_ERRORS)
async def retrieve_response(
    response_id: str,
    caller: CallerDep,
    clients: Clients,
    fanout: Fanout,
    stream: bool = False,
    starting_after: Annotated[int, Query(ge=-1)] = -1,
) -> Any:
    """The response as it stands; with `stream=true`, its events after `starting_after`."""
    record = await _record(clients, caller, response_id)
    shape = shape_of(record, background=True)
    if stream:
        return _stream(_events(fanout, caller.tenant_id, shape, after=starting_after))
    return object_of(record, shape)


@router.post("/responses/{response_id}/cancel", responses=OPENAI_ERRORS)
async def cancel_response(
    response_id: str, caller: CallerDep, clients: Clients, fanout: Fanout
) -> Any:
    """Cancel a response still running; answers it once it has ended."""
    record = await _record(clients, caller, response_id)
    if status_name(record.status) not in ("completed", "failed", "cancelled"):
        await clients.executor.Control(
            executor_pb2.ControlRequest(
                workflow_id=record.workflow_id,
                tenant_id=caller.tenant_id,
                action=executor_pb2.CONTROL_ACTION_CANCEL,
                reason="cancelled through the Responses API",
            ),
            metadata=tenant_metadata(caller.tenant_id),
        )
        await _until_ended(fanout, caller.tenant_id, record.workflow_id)
        record = await workflow_of(clients, caller.tenant_id, record.workflow_id)
    return object_of(record, shape_of(record, background=True))
