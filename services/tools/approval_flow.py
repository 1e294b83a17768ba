"""Human approvals over the workflow log: request, wait for the decision, decide.

The request is two events on the workflow's log (APPROVAL_REQUESTED, WAITING); whoever
decides appends APPROVAL_DECISION through `decide`. The waiter watches the log for that
event but trusts only the SQL row, which a conditional UPDATE made the first decision's:
an APPROVAL_DECISION appended by anyone else cannot approve anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from services.tools.approvals import (
    OPERATOR_DECISIONS,
    RUN_ENDED,
    TIMEOUT,
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalStore,
)
from shuttle.metrics import APPROVALS_PENDING
from shuttle.utf8 import json_text
from shuttle.workflow_log import EventDraft

log = logging.getLogger(__name__)

# How long to wait before watching the log again after the events service went away.
RESUBSCRIBE_SECONDS = 1.0


class WorkflowLog(Protocol):
    """The events service as the approval flow needs it."""

    async def append(
        self, workflow_id: str, tenant_id: str, events: Sequence[EventDraft]
    ) -> list[int]: ...

    def decisions(
        self, workflow_id: str, tenant_id: str, from_seq: int
    ) -> AsyncIterator[str | None]:
        """Approval ids of the APPROVAL_DECISION events from `from_seq` on, live, then None
        once the run's log has ended (STREAM_END); it may also stop early (a lost stream)."""
        ...


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    tenant_id: str
    workflow_id: str
    call_id: str
    agent_id: str
    tool_name: str
    arguments: dict[str, Any]
    operation: str
    risk_level: str
    timeout_seconds: float


def decision_payload(approval: Approval) -> dict[str, Any]:
    decided_at = approval.decided_at or datetime.now(UTC)
    return {
        "approval_id": approval.approval_id,
        "decision": approval.status,
        "approved_by": approval.decided_by,
        "timestamp": decided_at.isoformat().replace("+00:00", "Z"),
        "comments": approval.comment,
        "tool_name": approval.tool_name,
    }


class ApprovalService:
    def __init__(self, store: ApprovalStore, workflow_log: WorkflowLog) -> None:
        self._store = store
        self._log = workflow_log

    @property
    def store(self) -> ApprovalStore:
        return self._store

    async def request_and_wait(self, request: ApprovalRequest) -> Approval:
        """Ask for a decision and wait for it; returns the decided approval (timeout too)."""
        arguments_json = json_text(request.arguments)
        approval = await self._store.create(
            tenant_id=request.tenant_id,
            workflow_id=request.workflow_id,
            call_id=request.call_id,
            tool_name=request.tool_name,
            arguments_json=arguments_json,
            operation=request.operation,
            risk_level=request.risk_level,
            timeout_seconds=request.timeout_seconds,
        )
        seqs = await self._log.append(
            request.workflow_id,
            request.tenant_id,
            [
                EventDraft(
                    type="APPROVAL_REQUESTED",
                    agent_id=request.agent_id,
                    message=f"Approval needed to run {request.tool_name}",
                    payload={
                        "approval_id": approval.approval_id,
                        "tool_name": request.tool_name,
                        "operation": request.operation,
                        "risk_level": request.risk_level,
                        "timeout_seconds": request.timeout_seconds,
                        "details": {"arguments": request.arguments, "call_id": request.call_id},
                    },
                ),
                EventDraft(
                    type="WAITING",
                    agent_id=request.agent_id,
                    message=f"Waiting for approval of {request.tool_name}",
                    payload={
                        "waiting_for": approval.approval_id,
                        "wait_reason": "approval_required",
                        "estimated_wait_seconds": request.timeout_seconds,
                    },
                ),
            ],
        )
        APPROVALS_PENDING.inc()
        try:
            async with asyncio.timeout(request.timeout_seconds):
                return await self._wait(approval, seqs[0])
        except TimeoutError:
            return await self._time_out(approval, request.agent_id)
        finally:
            APPROVALS_PENDING.dec()

    async def _wait(self, approval: Approval, from_seq: int) -> Approval:
        while True:
            try:
                async for approval_id in self._log.decisions(
                    approval.workflow_id, approval.tenant_id, from_seq
                ):
                    if approval_id is None:
                        return await self._close_for_ended_run(approval)
                    if approval_id != approval.approval_id:
                        continue
                    current = await self._store.get(approval.approval_id, approval.tenant_id)
                    if not current.pending:
                        return current
                    log.warning(
                        "APPROVAL_DECISION on the log without a recorded decision; ignored",
                        extra={"approval_id": approval.approval_id},
                    )
            except Exception as exc:
                log.warning(
                    "lost the workflow log while waiting for an approval; watching again",
                    exc_info=exc,
                    extra={"approval_id": approval.approval_id},
                )
            # The stream ended or failed: the row still tells us if a decision came meanwhile.
            current = await self._store.get(approval.approval_id, approval.tenant_id)
            if not current.pending:
                return current
            await asyncio.sleep(RESUBSCRIBE_SECONDS)

    async def _close_for_ended_run(self, approval: Approval) -> Approval:
        """The run's log ended without a decision: close the approval so that no later
        decision runs the tool for a run that is over. Not logged: the log is closed."""
        try:
            return await self._store.decide(
                approval.approval_id,
                approval.tenant_id,
                RUN_ENDED,
                decided_by="system",
                comment="the run ended before a decision",
            )
        except ApprovalAlreadyDecidedError as exc:
            return exc.approval

    async def _time_out(self, approval: Approval, agent_id: str) -> Approval:
        try:
            decided = await self._store.decide(
                approval.approval_id, approval.tenant_id, TIMEOUT, decided_by="system"
            )
        except ApprovalAlreadyDecidedError as exc:
            # A decision landed at the last moment: it wins, and its event is already logged.
            return exc.approval
        await self._append_decision(decided, agent_id)
        return decided

    async def decide(
        self,
        approval_id: str,
        tenant_id: str,
        decision: str,
        *,
        decided_by: str = "",
        comment: str = "",
    ) -> Approval:
        """An operator's decision; the first one wins, later ones raise AlreadyDecided."""
        if decision not in OPERATOR_DECISIONS:
            raise ValueError(
                f"decision must be one of {sorted(OPERATOR_DECISIONS)}, got {decision!r}"
            )
        decided = await self._store.decide(
            approval_id, tenant_id, decision, decided_by=decided_by, comment=comment
        )
        await self._append_decision(decided, "")
        return decided

    async def _append_decision(self, approval: Approval, agent_id: str) -> None:
        verb = {"approved": "Approved", "denied": "Denied"}.get(approval.status, "Timed out")
        await self._log.append(
            approval.workflow_id,
            approval.tenant_id,
            [
                EventDraft(
                    type="APPROVAL_DECISION",
                    agent_id=agent_id,
                    message=f"{verb}: {approval.tool_name}",
                    payload=decision_payload(approval),
                )
            ],
        )
