"""ExecutorService over gRPC: converts requests to RunRequests and back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from services.executor.adapters.events import GrpcWorkflowLog
from services.executor.commands.desk import (
    CommandDesk,
    ControlAction,
    InvalidCommand,
    InvalidTransition,
)
from services.executor.ports import RunRequest
from services.executor.runs import RunManager, RunsStopping
from shuttle.events_client import EventsClient, UpstreamError
from shuttle.grpc_auth import GATEWAY, method_roles
from shuttle.grpc_server import Context
from shuttle.settings import DEFAULT_MAX_BUDGET_TOKENS
from shuttle.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from shuttle.workflow_log import AppendRefused, LogClosed, LogUnavailable

_MODE_NAMES = {
    common_pb2.MODE_UNSPECIFIED: "",
    common_pb2.MODE_SIMPLE: "SIMPLE",
    common_pb2.MODE_STANDARD: "STANDARD",
    common_pb2.MODE_COMPLEX: "COMPLEX",
}


async def _abort_from(context: Context, exc: grpc.aio.AioRpcError) -> None:
    """Pass a downstream failure on with its code and a message naming where it came from."""
    await context.abort(exc.code(), f"events service: {exc.details()}")


async def _abort_append(context: Context, exc: LogUnavailable | LogClosed | AppendRefused) -> None:
    """A command the log did not take, with the status the events service gave."""
    if isinstance(exc, LogUnavailable):
        code = grpc.StatusCode.UNAVAILABLE
    elif isinstance(exc, LogClosed):
        code = grpc.StatusCode.FAILED_PRECONDITION
    else:
        code = grpc.StatusCode[exc.status]
    await context.abort(code, f"events service: {exc}")


HISTORY_ROLES = ("user", "assistant")
# Who may call each method: runs are started and steered through the gateway alone.
CALLER_ROLES = method_roles(
    executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"],
    {name: {GATEWAY} for name in ("StartRun", "Run", "GetRun", "Control", "Interrupt")},
)

_ACTIONS = {
    executor_pb2.CONTROL_ACTION_PAUSE: ControlAction.PAUSE,
    executor_pb2.CONTROL_ACTION_RESUME: ControlAction.RESUME,
    executor_pb2.CONTROL_ACTION_CANCEL: ControlAction.CANCEL,
}


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    def __init__(
        self,
        runs: RunManager,
        events: EventsClient,
        desk: CommandDesk | None = None,
        *,
        max_budget_tokens: int = DEFAULT_MAX_BUDGET_TOKENS,
    ) -> None:
        self._runs = runs
        self._max_budget_tokens = max_budget_tokens
        self._events = events
        self._desk = desk or CommandDesk(GrpcWorkflowLog(events), runs.deliver)

    async def _start(self, request: executor_pb2.StartRunRequest, context: Context) -> str:
        if not request.query.strip():
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "query must not be empty")
        if request.budget_tokens > self._max_budget_tokens:
            most = self._max_budget_tokens
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"budget_tokens is {request.budget_tokens}; at most {most} are allowed "
                f"(SHUTTLE_MAX_BUDGET_TOKENS={most})",
            )
        history = []
        for index, message in enumerate(request.history):
            if message.role not in HISTORY_ROLES:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"history[{index}].role is {message.role!r}; earlier turns are "
                    "'user' or 'assistant' messages",
                )
            history.append({"role": message.role, "content": message.content})
        task_context = _task_context(request.context_json)
        if task_context is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "context_json must be a JSON object (or empty for none)",
            )
            raise AssertionError("unreachable")
        run = RunRequest(
            query=request.query,
            tenant_id=request.tenant_id,
            owner=request.owner,
            session_id=request.session_id,
            mode=_MODE_NAMES.get(request.mode, ""),
            budget_tokens=request.budget_tokens,
            history=tuple(history),
            model=request.model,
            context=task_context,
        )
        try:
            return await self._runs.start(run)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        except RunsStopping as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        except grpc.aio.AioRpcError as exc:
            await _abort_from(context, exc)
            raise

    async def StartRun(
        self, request: executor_pb2.StartRunRequest, context: Context
    ) -> executor_pb2.StartRunResponse:
        workflow_id = await self._start(request, context)
        return executor_pb2.StartRunResponse(
            workflow_id=workflow_id, status=common_pb2.WORKFLOW_STATUS_PENDING
        )

    async def Run(
        self, request: executor_pb2.StartRunRequest, context: Context
    ) -> AsyncIterator[common_pb2.Event]:
        workflow_id = await self._start(request, context)
        # Followed like the gateway follows a log: an events service restart mid-run costs
        # the caller neither its stream nor an event.
        log = self._events.follow(workflow_id, request.tenant_id)
        try:
            async for events in log:
                for event in events:
                    yield event
        except UpstreamError as exc:
            await context.abort(exc.status, f"events service: {exc.message}")

    async def GetRun(
        self, request: executor_pb2.GetRunRequest, context: Context
    ) -> executor_pb2.RunInfo:
        try:
            wf = await self._events.get_workflow(request.workflow_id, request.tenant_id)
        except grpc.aio.AioRpcError as exc:
            await _abort_from(context, exc)
            raise
        return executor_pb2.RunInfo(
            workflow_id=wf.workflow_id,
            status=wf.status,
            query=wf.query,
            result=wf.result,
            error=wf.error,
            usage=wf.usage,
            created_at=wf.created_at,
            updated_at=wf.updated_at,
            duration_ms=wf.duration_ms,
            last_seq=wf.last_seq,
            session_id=wf.session_id,
        )

    async def Control(
        self, request: executor_pb2.ControlRequest, context: Context
    ) -> executor_pb2.ControlResponse:
        action = _ACTIONS.get(request.action)
        if action is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "action must be PAUSE, RESUME or CANCEL"
            )
            raise AssertionError("unreachable")
        await _require_workflow_id(request.workflow_id, context)
        try:
            status = await self._desk.control(
                request.workflow_id, request.tenant_id, action, request.reason
            )
        except InvalidTransition as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            raise
        except grpc.aio.AioRpcError as exc:
            await _abort_from(context, exc)
            raise
        except (LogUnavailable, LogClosed, AppendRefused) as exc:
            await _abort_append(context, exc)
            raise
        return executor_pb2.ControlResponse(
            status=common_pb2.WorkflowStatus.Value(f"WORKFLOW_STATUS_{status}")
        )

    async def Interrupt(
        self, request: executor_pb2.InterruptRequest, context: Context
    ) -> executor_pb2.InterruptResponse:
        await _require_workflow_id(request.workflow_id, context)
        try:
            await self._desk.interrupt(request.workflow_id, request.tenant_id, request.message)
        except InvalidCommand as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        except InvalidTransition as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            raise
        except grpc.aio.AioRpcError as exc:
            await _abort_from(context, exc)
            raise
        except (LogUnavailable, LogClosed, AppendRefused) as exc:
            await _abort_append(context, exc)
            raise
        return executor_pb2.InterruptResponse(accepted=True)


def _task_context(context_json: str) -> dict[str, Any] | None:
    """The request's context as an object ({} when empty); None when it is not one."""
    if not context_json.strip():
        return {}
    try:
        parsed = json.loads(context_json)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


async def _require_workflow_id(workflow_id: str, context: Context) -> None:
    if not workflow_id.strip():
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "workflow_id must not be empty")
