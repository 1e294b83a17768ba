"""StartRun and Run over grpc-web, answered by the gateway through the task API's own path.

A browser's run starts as `POST /api/v1/tasks` starts one (`gateway.submit`): the task API's
checks, its `Idempotency-Key` (the request header), the session it joins, the task index and
whatever limits that path applies. The fields the task API does not take (`tenant_id`,
`owner`, `history`) are the gateway's to set, never the caller's. Run then follows the new
log through the gateway's events client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import grpc
from pydantic import ValidationError
from starlette.requests import Request

from gateway.backends import Backends
from gateway.edge.grpc_web_status import RpcRefusal
from gateway.edge.tenancy import Caller
from gateway.errors import ApiError
from gateway.routes.tasks import TaskCreate
from gateway.submit import MODES, submit
from shuttle.events_client import UpstreamError
from shuttle.v1 import common_pb2, executor_pb2

IDEMPOTENCY_KEY_MAX_CHARS = 255
"""As the task API's `Idempotency-Key` header allows."""
_MODE_NAMES = {value: name for name, value in MODES.items()}


@dataclass(frozen=True)
class Started:
    reply: executor_pb2.StartRunResponse
    headers: dict[str, str] = field(default_factory=dict)


async def start_run(
    request: Request, caller: Caller, message: executor_pb2.StartRunRequest
) -> Started:
    """Start the run `message` asks for, as the caller's task."""
    state = request.app.state
    backends: Backends = state.backends
    try:
        spec = task_body(message).spec(state.settings.max_budget_tokens)
        done = await submit(
            backends,
            state.task_index,
            state.sessions,
            caller.tenant_id,
            caller.key_id,
            spec,
            idempotency_key(request),
        )
        status = done.status
        if done.replayed:
            workflow = await backends.events.get_workflow(done.workflow_id, caller.tenant_id)
            status = workflow.status
    except ApiError as exc:
        raise RpcRefusal.from_api_error(exc) from None
    except grpc.aio.AioRpcError as exc:
        raise RpcRefusal(exc.code(), exc.details() or exc.code().name) from None
    reply = executor_pb2.StartRunResponse(
        workflow_id=done.workflow_id, status=common_pb2.WorkflowStatus.ValueType(status)
    )
    return Started(reply, {"idempotent-replayed": "true"} if done.replayed else {})


async def follow_run(
    backends: Backends, tenant_id: str, workflow_id: str
) -> AsyncGenerator[common_pb2.Event, None]:
    """The run's log from its first event to STREAM_END."""
    try:
        async with aclosing(backends.events.follow(workflow_id, tenant_id)) as log:
            async for batch in log:
                for event in batch:
                    yield event
    except UpstreamError as exc:
        raise RpcRefusal(exc.status, f"events service: {exc.message}") from None


def task_body(message: executor_pb2.StartRunRequest) -> TaskCreate:
    """The task API's request body for what `message` asks, checked as its schema checks it."""
    if message.mode and message.mode not in _MODE_NAMES:
        raise _invalid(f"mode: {message.mode} is not a shuttle.v1.Mode")
    body: dict[str, Any] = {
        "query": message.query,
        "session_id": message.session_id or None,
        "mode": _MODE_NAMES.get(message.mode),
        "model": message.model or None,
        "budget_tokens": message.budget_tokens or None,
        "context": _context(message.context_json),
    }
    try:
        return TaskCreate.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
        )
        raise _invalid(problems) from None


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_CHARS:
        raise _invalid(
            f"Idempotency-Key is {len(key)} characters; it takes 1 to {IDEMPOTENCY_KEY_MAX_CHARS}"
        )
    return key


def _context(context_json: str) -> dict[str, Any] | None:
    if not context_json.strip():
        return None
    try:
        parsed = json.loads(context_json)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise _invalid("context_json: must be a JSON object (or empty for none)")
    return parsed


def _invalid(message: str) -> RpcRefusal:
    return RpcRefusal(grpc.StatusCode.INVALID_ARGUMENT, message)
