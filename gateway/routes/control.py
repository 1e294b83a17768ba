"""Commands on a running task (pause, resume, cancel, interrupt) and approval decisions.

202 when the command is accepted; 409 when the service says the workflow's state forbids
it (FAILED_PRECONDITION), or an approval was already decided; 404 for another tenant's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from gateway.backends import tenant_metadata
from gateway.edge.tenancy import CallerDep
from gateway.routes.common import ERRORS, Clients, require_workflow
from gateway.workflow_status import status_name
from shuttle.v1 import executor_pb2, tools_pb2

router = APIRouter(prefix="/api/v1", tags=["control"])

CONTROL_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    409: {"description": "the workflow's state forbids this command"},
}

_ACTIONS = {
    "pause": executor_pb2.CONTROL_ACTION_PAUSE,
    "resume": executor_pb2.CONTROL_ACTION_RESUME,
    "cancel": executor_pb2.CONTROL_ACTION_CANCEL,
}


class ControlBody(BaseModel):
    reason: str = Field("", max_length=2_000)


class InterruptBody(BaseModel):
    message: str = Field(min_length=1, max_length=100_000)


class DecisionBody(BaseModel):
    decision: Literal["approved", "denied"]
    comment: str = Field("", max_length=10_000)


async def _control(
    action: str, workflow_id: str, caller: CallerDep, clients: Clients, reason: str
) -> JSONResponse:
    tenant = caller.tenant_id
    await require_workflow(clients, tenant, workflow_id)
    reply = await clients.executor.Control(
        executor_pb2.ControlRequest(
            workflow_id=workflow_id, tenant_id=tenant, action=_ACTIONS[action], reason=reason
        ),
        metadata=tenant_metadata(tenant),
    )
    body = {"workflow_id": workflow_id, "action": action, "status": status_name(reply.status)}
    return JSONResponse(body, status_code=202)


OptionalControl = Annotated[ControlBody | None, Body()]


@router.post("/tasks/{workflow_id}/pause", status_code=202, responses=CONTROL_ERRORS)
async def pause(
    workflow_id: str, caller: CallerDep, clients: Clients, body: OptionalControl = None
) -> JSONResponse:
    """Pause at the next checkpoint."""
    return await _control("pause", workflow_id, caller, clients, body.reason if body else "")


@router.post("/tasks/{workflow_id}/resume", status_code=202, responses=CONTROL_ERRORS)
async def resume(
    workflow_id: str, caller: CallerDep, clients: Clients, body: OptionalControl = None
) -> JSONResponse:
    """Resume a paused task."""
    return await _control("resume", workflow_id, caller, clients, body.reason if body else "")


@router.post("/tasks/{workflow_id}/cancel", status_code=202, responses=CONTROL_ERRORS)
async def cancel(
    workflow_id: str, caller: CallerDep, clients: Clients, body: OptionalControl = None
) -> JSONResponse:
    """Cancel the task; it ends with WORKFLOW_CANCELLED."""
    return await _control("cancel", workflow_id, caller, clients, body.reason if body else "")


@router.post("/tasks/{workflow_id}/interrupt", status_code=202, responses=CONTROL_ERRORS)
async def interrupt(
    workflow_id: str, body: InterruptBody, caller: CallerDep, clients: Clients
) -> JSONResponse:
    """Send a follow-up message the agent sees at its next iteration."""
    tenant = caller.tenant_id
    await require_workflow(clients, tenant, workflow_id)
    reply = await clients.executor.Interrupt(
        executor_pb2.InterruptRequest(
            workflow_id=workflow_id, tenant_id=tenant, message=body.message
        ),
        metadata=tenant_metadata(tenant),
    )
    return JSONResponse({"workflow_id": workflow_id, "accepted": reply.accepted}, status_code=202)


@router.post("/approvals/{approval_id}", status_code=202, responses=CONTROL_ERRORS)
async def decide_approval(
    approval_id: str, body: DecisionBody, caller: CallerDep, clients: Clients
) -> JSONResponse:
    """Approve or deny a pending tool call; the first decision wins, later ones are 409."""
    tenant = caller.tenant_id
    approval = await clients.tools.DecideApproval(
        tools_pb2.DecideApprovalRequest(
            approval_id=approval_id,
            tenant_id=tenant,
            decision=body.decision,
            comment=body.comment,
            decided_by=caller.key_id,
        ),
        metadata=tenant_metadata(tenant),
    )
    return JSONResponse(
        {
            "approval_id": approval.approval_id,
            "workflow_id": approval.workflow_id,
            "tool_name": approval.tool_name,
            "status": approval.status,
            "decided_by": approval.decided_by,
            "comment": approval.comment,
        },
        status_code=202,
    )
